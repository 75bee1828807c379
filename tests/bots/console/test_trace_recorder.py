"""The trace recorder shapes what it is told when it writes a batch, not on the answer's path:
what cannot be shaped costs that one event (counted), never the feed that told it nor the rest
of the batch. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from bots.surface.contract import RunStarted
from bots.traces.recorder import TraceRecorder
from core.events import MessageEnd, ToolExecutionEnd, ToolExecutionStart, TurnStart
from core.messages import AssistantMessage, Author, Text, ToolResultMessage, Usage, UserMessage
from storage.base import ConversationStore
from tests.storage.conftest import (  # noqa: F401 (fixtures: both backends)
    Backend,
    backend,
    clock,
    db_path,
    pg_server,
    pg_url,
    store,
)

KEY, CHANNEL = "slack:T1:C1:1.0", "slack:T1:C1"


class Unprintable:
    """A value no encoder can write (`str` fails too)."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this")


def result(text: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id="t", tool_name="look", content=[Text(text=text)])


async def test_an_event_that_cannot_be_shaped_is_lost_alone_and_never_raises_into_the_feed(
    store: ConversationStore,  # noqa: F811
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = (await store.start_run(conversation.id, user_id="U1", model="m")).id
    recorder = TraceRecorder(store, flush_delay_s=0.0)
    ada = Author(id="U1", name="Ada")
    events: list[Any] = [
        RunStarted(KEY, run, ada),
        TurnStart(1),
        MessageEnd(AssistantMessage(model="m", stop_reason="tool_use", usage=Usage(input=3))),
        ToolExecutionStart("t1", "look", {"what": Unprintable()}, "Look"),
        ToolExecutionEnd("t1", "look", result("looked once"), 0.002),
        MessageEnd(UserMessage(content="and this too", author=ada)),
        ToolExecutionStart("t2", "look", {"what": "fine"}, "Look again"),
        ToolExecutionEnd("t2", "look", result("looked twice"), 0.003),
    ]
    for event in events:
        recorder.put(run, event)  # never raises, whatever it was told
    await recorder.flushed()
    await recorder.close()

    assert recorder.dropped == 1
    stored = await store.run_traces([run])
    assert [e.kind for e in stored] == ["model_call", "steer", "tool_call"]
    assert [e.seq for e in stored] == [1, 3, 4]  # the lost one keeps its place
    assert stored[0].data["input"] == 3 and stored[0].data["turn"] == 1
    assert stored[1].data["text"] == "and this too" and stored[1].data["author"] == "Ada"
    assert stored[2].data["label"] == "Look again"
    assert stored[2].data["arguments"] == {"text": '{"what": "fine"}'}
    assert stored[2].data["result"] == {"text": "looked twice"}
