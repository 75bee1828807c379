"""The shared surface base: one dispatch of events to hooks, and one set of outcome marks."""

from __future__ import annotations

from typing import Any

import pytest

from bots.surface.base import OUTCOME_MARK, SurfaceBase, outcome_line
from bots.surface.contract import FileOut, Notice, RunFinished, RunStarted, SurfaceEvent
from core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnStart,
)
from core.messages import AssistantMessage, Text, ToolResultMessage, Usage, UserMessage
from core.models.base import TextDelta, ThinkingDelta


class Recorder(SurfaceBase):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    @property
    def ref(self) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        self.seen.append(("close", None))

    async def on_run_started(self, event: RunStarted) -> None:
        self.seen.append(("run_started", event.run_id))

    async def on_reply_started(self, message: AssistantMessage) -> None:
        self.seen.append(("reply_started", None))

    async def on_text(self, message: AssistantMessage, delta: str) -> None:
        self.seen.append(("text", delta))

    async def on_thinking(self) -> None:
        self.seen.append(("thinking", None))

    async def on_reply_ended(self, message: AssistantMessage) -> None:
        self.seen.append(("reply_ended", message.text()))

    async def on_tool_started(self, event: ToolExecutionStart) -> None:
        self.seen.append(("tool_started", event.tool_name))

    async def on_tool_ended(self, event: ToolExecutionEnd) -> None:
        self.seen.append(("tool_ended", event.is_error))

    async def on_notice(self, event: Notice) -> None:
        self.seen.append(("notice", event.text))

    async def on_file(self, event: FileOut) -> None:
        self.seen.append(("file", event.name))

    async def on_run_finished(self, event: RunFinished) -> None:
        self.seen.append(("run_finished", event.outcome))


async def test_each_event_reaches_its_one_hook_and_bookkeeping_reaches_none() -> None:
    reply = AssistantMessage(content=[Text(text="hi")])
    result = ToolResultMessage(tool_call_id="c1", tool_name="bash", content=[], is_error=True)
    events: list[SurfaceEvent] = [
        RunStarted(conversation_key="k", run_id=7, author=None),
        AgentStart(),
        TurnStart(turn=1),
        MessageStart(message=UserMessage(content="question")),  # not the assistant's: nothing
        MessageEnd(message=UserMessage(content="question")),
        MessageStart(message=reply),
        MessageUpdate(message=reply, delta=ThinkingDelta(partial=reply, index=0, delta="hm")),
        MessageUpdate(message=reply, delta=TextDelta(partial=reply, index=1, delta="hi")),
        MessageEnd(message=reply),
        ToolExecutionStart(tool_call_id="c1", tool_name="bash", arguments={}),
        ToolExecutionEnd(tool_call_id="c1", tool_name="bash", result=result, duration_s=0.1),
        Notice(text="careful"),
        FileOut(path="a.txt", name="a.txt", mime_type="text/plain", data=b"x"),
        RunFinished(conversation_key="k", run_id=7, outcome="done", usage=Usage(), final_text="hi"),
        AgentEnd(messages=[], reason="stop"),
    ]
    surface = Recorder()
    for event in events:
        await surface.emit(event)
    assert surface.seen == [
        ("run_started", 7),
        ("reply_started", None),
        ("thinking", None),
        ("text", "hi"),
        ("reply_ended", "hi"),
        ("tool_started", "bash"),
        ("tool_ended", True),
        ("notice", "careful"),
        ("file", "a.txt"),
        ("run_finished", "done"),
    ]


@pytest.mark.parametrize(
    ("outcome", "error", "reference", "expected"),
    [
        ("done", None, None, None),
        ("done", "I stopped after 40 turns.", None, "ℹ️ I stopped after 40 turns."),
        ("aborted", None, None, "⏹️ Stopped."),
        ("interrupted", None, None, "⚠️ This answer did not finish."),
        (
            "error",
            "The model  is\nunavailable.",
            "r-1",
            "❌ The model is unavailable. (reference r-1)",
        ),
    ],
)
def test_an_answer_ends_in_the_same_words_on_every_platform(
    outcome: Any, error: str | None, reference: str | None, expected: str | None
) -> None:
    assert outcome_line(outcome, error, reference) == expected


def test_a_failure_and_an_interruption_look_different() -> None:
    assert OUTCOME_MARK["error"] != OUTCOME_MARK["interrupted"]
