"""Runner behaviour people and operators notice, pinned through the public face only
(`submit`, `stop`, `wait`, `recover`) with the real store, ScriptedModel and a recording
surface: budgets per conversation and their UTC day, the turn limit, what a stop says, the
cancel signal tools see, the model recorded, which messages a compaction covers, and the
interrupted results recovery writes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bots import compaction
from bots.attachments import user_message
from bots.incoming import Incoming
from bots.recovery import INTERRUPTED_TEXT
from bots.runner import DELIVERED_TEXT, QUEUED_TEXT, ConversationRunner
from bots.settings import BudgetSettings, ChannelSettings, CompactionSettings, Settings
from bots.surface.contract import RunStarted
from core.messages import (
    AssistantMessage,
    Author,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.models.base import ModelInfo, ModelRequest, Prices
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.fakes.waiting_tool import WaitTool

ADA = Author(id="U1", name="Ada")
BOB = Author(id="U2", name="Bob")
CHANNEL = "slack:T9:C9"
KEY = f"{CHANNEL}:1700000000.000100"
OTHER_KEY = f"{CHANNEL}:1700000000.000200"
PRICES = Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
EXPENSIVE = Usage(input=100_000, output=10_000)  # $0.45 at these prices
MIDNIGHT = datetime(2026, 3, 11, tzinfo=UTC).timestamp()  # 2026-03-11 00:00:00 UTC


def info(model_id: str, window: int = 200_000) -> ModelInfo:
    return ModelInfo(
        id=model_id,
        provider="scripted",
        context_window=window,
        max_output_tokens=4_096,
        prices=PRICES,
    )


class Clock:
    """A settable clock shared by the store (usage timestamps) and the runner (budget day)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NoteParams(BaseModel):
    text: str


class NoteTool(AgentTool[NoteParams]):
    name = "note"
    label = "Note"
    description = "Takes a note."
    parameters = NoteParams

    async def execute(self, call_id: str, params: NoteParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(f"noted {params.text}")


_deliveries = iter(range(1, 1_000_000))


def incoming(text: str, *, key: str = KEY, author: Author = ADA) -> Incoming:
    return Incoming(
        conversation_key=key,
        channel_key=CHANNEL,
        author=author,
        text=text,
        delivery_id=f"pinned-{next(_deliveries)}",
        timestamp=MIDNIGHT,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock(MIDNIGHT + 12 * 3600)


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[SqliteStore]:
    async with SqliteStore.open(tmp_path / "teammate.db", clock=clock) as opened:
        yield opened


def make_runner(
    store: SqliteStore,
    tmp_path: Path,
    models: Callable[[str], ScriptedModel],
    *,
    tools: Sequence[AnyTool] = (),
    clock: Callable[[], float] | None = None,
    surfaces: RecordingSurfaces | None = None,
    **settings: Any,
) -> ConversationRunner:
    return ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path, **settings),
        model_factory=models,
        toolset_factory=lambda _channel: tools,
        platform_rules="Plain text only.",
        surfaces=surfaces or RecordingSurfaces(),
        **({"clock": clock} if clock is not None else {}),
    )


async def ask(runner: ConversationRunner, text: str, key: str = KEY) -> RecordingSurface:
    surface = RecordingSurface()
    await runner.submit(incoming(text, key=key), surface)
    await runner.wait(key)
    return surface


async def stored(store: SqliteStore, key: str = KEY) -> list[Message]:
    conversation = await store.get_conversation(key)
    assert conversation is not None
    return [s.message for s in (await store.load(conversation.id)).messages]


# -- budgets -----------------------------------------------------------------------------------


async def test_a_conversation_over_its_daily_budget_is_refused_and_others_are_not(
    store: SqliteStore, tmp_path: Path, clock: Clock
) -> None:
    model = ScriptedModel(
        [Reply(text="pricey", usage=EXPENSIVE), Reply(text="elsewhere")], info=info("m")
    )
    runner = make_runner(
        store,
        tmp_path,
        lambda _id: model,
        clock=clock,
        budgets=BudgetSettings(conversation_usd_per_day=0.40),
    )
    await ask(runner, "first")
    refused = await ask(runner, "second")
    [finished] = refused.finished()
    assert finished.outcome == "error" and finished.error_text is not None
    assert "this conversation has used $0.45 of $0.40 today" in finished.error_text
    assert "budgets.conversation_usd_per_day" in finished.error_text
    assert "midnight UTC" in finished.error_text
    assert len(model.requests) == 1
    # The limit is per conversation: another thread of the same channel is answered.
    other = await ask(runner, "third", key=OTHER_KEY)
    assert [f.outcome for f in other.finished()] == ["done"]
    assert len(model.requests) == 2


@pytest.mark.parametrize(
    ("spent_at", "asked_at", "refused"),
    [
        (MIDNIGHT - 1, MIDNIGHT - 0.5, True),  # the same UTC day
        (MIDNIGHT - 1, MIDNIGHT, False),  # a new day starts at midnight UTC exactly
        (MIDNIGHT, MIDNIGHT + 60, True),  # spent at midnight counts for the new day
        (MIDNIGHT - 60, MIDNIGHT + 86_399, False),
        (MIDNIGHT + 86_399, MIDNIGHT + 86_399.5, True),
        (MIDNIGHT + 86_399, MIDNIGHT + 86_400, False),
    ],
)
async def test_budgets_reset_at_midnight_utc(
    store: SqliteStore,
    tmp_path: Path,
    clock: Clock,
    spent_at: float,
    asked_at: float,
    refused: bool,
) -> None:
    model = ScriptedModel(
        [Reply(text="pricey", usage=EXPENSIVE), Reply(text="again")], info=info("m")
    )
    runner = make_runner(
        store,
        tmp_path,
        lambda _id: model,
        clock=clock,
        budgets=BudgetSettings(conversation_usd_per_day=0.40),
    )
    clock.now = spent_at
    await ask(runner, "first")
    clock.now = asked_at
    [finished] = (await ask(runner, "second")).finished()
    assert (finished.outcome == "error") is refused
    assert len(model.requests) == (1 if refused else 2)


# -- the turn limit, stopping, cancel signal --------------------------------------------------


async def test_a_run_that_hits_the_turn_limit_says_so_and_leaves_a_usable_history(
    store: SqliteStore, tmp_path: Path
) -> None:
    def forever(_request: ModelRequest) -> Reply:
        return Reply(tool_calls=[call("note", {"text": "more"})])

    model = ScriptedModel(default=forever, info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[NoteTool()], max_turns=3)
    surface = await ask(runner, "keep going")

    assert len(model.requests) == 3
    [finished] = surface.finished()
    assert finished.outcome == "done"
    assert finished.error_text == (
        "I stopped after 3 steps in one go (the turn limit). "
        "Tell me to continue if you want me to keep going."
    )
    # Every call of the run was answered: the next run sends a complete history.
    history = await stored(store)
    calls = [c.id for m in history if isinstance(m, AssistantMessage) for c in m.tool_calls()]
    results = [m.tool_call_id for m in history if isinstance(m, ToolResultMessage)]
    assert len(calls) == 3 and results == calls


async def test_a_stop_tells_people_who_stopped_it_and_tools_see_the_same_reason(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[tool])
    surface = RecordingSurface()
    await runner.submit(incoming("wait for it"), surface)
    await asyncio.wait_for(tool.started.wait(), 5)
    assert runner.stop(KEY, by=BOB) == "stopped"
    await runner.wait(KEY)

    assert tool.saw == [(True, "Stopped by Bob.")]
    [finished] = surface.finished()
    assert finished.outcome == "aborted" and finished.error_text == "Stopped by Bob."
    assert runner.stop(KEY) == "idle"  # nothing left to stop


async def test_a_stop_without_a_name_says_stopped(store: SqliteStore, tmp_path: Path) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[tool])
    surface = RecordingSurface()
    await runner.submit(incoming("wait for it"), surface)
    await asyncio.wait_for(tool.started.wait(), 5)
    runner.stop(KEY)
    await runner.wait(KEY)
    assert tool.saw == [(True, "Stopped on request.")]
    assert surface.finished()[0].error_text == "Stopped on request."


# -- what is recorded -------------------------------------------------------------------------


async def test_the_channel_model_is_recorded_on_the_run_and_on_each_usage_row(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = WaitTool()
    made: list[str] = []

    def models(model_id: str) -> ScriptedModel:
        made.append(model_id)
        return ScriptedModel(
            [Reply(text="thinking", tool_calls=[call("wait")], usage=Usage(input=10, output=5))],
            info=info(model_id),
        )

    runner = make_runner(
        store,
        tmp_path,
        models,
        tools=[tool],
        model="default-model",
        channels={CHANNEL: ChannelSettings(model="channel-model")},
    )
    await runner.submit(incoming("go"), RecordingSurface())
    await asyncio.wait_for(tool.started.wait(), 5)
    [running] = await store.running_runs()
    assert running.model == "channel-model"
    runner.stop(KEY)
    await runner.wait(KEY)

    assert made == ["channel-model"]
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT model, input_tokens FROM usage_ledger").fetchall()
        runs = db.execute("SELECT model FROM runs").fetchall()
    assert rows == [("channel-model", 10)]
    assert runs == [("channel-model",)]


# -- compaction -------------------------------------------------------------------------------


def _long(text: str, tokens: int) -> str:
    return (text + " ") * (tokens * 4 // (len(text) + 1))


def _is_summary_request(request: ModelRequest) -> bool:
    return request.system_prompt.startswith("You summarise")


def _texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() if not isinstance(m, ToolResultMessage) else "(result)" for m in messages]


async def test_a_compaction_covers_exactly_the_messages_before_those_kept(
    store: SqliteStore, tmp_path: Path
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    for turn in range(10):
        await store.append_message(
            conversation.id, UserMessage(content=_long(f"question {turn}", 400), author=ADA)
        )
        await store.append_message(
            conversation.id, AssistantMessage(content=[Text(text=_long(f"answer {turn}", 50))])
        )

    def reply(request: ModelRequest) -> Reply:
        if _is_summary_request(request):
            return Reply(text="## Goal\nAnswer Ada.")
        return Reply(text="answered", usage=Usage(input=1_000, output=10))

    model = ScriptedModel(default=reply, info=info("small", window=4_000))
    runner = make_runner(
        store,
        tmp_path,
        lambda _id: model,
        compaction=CompactionSettings(reserve_tokens=500, keep_recent_tokens=1_000),
    )
    await ask(runner, "question 10")
    first_answer = model.requests[-1]
    kept = _texts(first_answer.messages[1:])
    assert "<conversation-summary>" in first_answer.messages[0].text()

    loaded = await store.load(conversation.id)
    assert loaded.compaction is not None
    everything = [s for s in loaded.messages]
    # What was kept verbatim starts right after the compaction's last message...
    assert _texts([s.message for s in everything])[: len(kept)] == kept
    assert everything[0].seq == loaded.compaction.up_to_seq + 1
    # ...and what was summarised is everything up to it: the older turns reached the summariser.
    summarised = " ".join(
        m.text() for r in model.requests if _is_summary_request(r) for m in r.messages
    )
    last_summarised = loaded.compaction.up_to_seq
    assert last_summarised % 2 == 0  # a whole turn: ends with an answer
    assert f"answer {last_summarised // 2 - 1}" in summarised
    assert f"question {last_summarised // 2}" not in summarised

    # The next run sends the same summary and the same kept messages, then what came since.
    await ask(runner, "question 11")
    second_answer = model.requests[-1]
    assert _texts(second_answer.messages[1:])[: len(kept)] == kept
    assert _texts(second_answer.messages[1:])[len(kept) :][-1].endswith("question 11")


# -- recovery ---------------------------------------------------------------------------------


async def test_recovery_answers_each_unfinished_call_as_interrupted_and_tells_the_thread(
    store: SqliteStore, tmp_path: Path
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"name": "thread"}, owner={}
    )
    await store.append_message(conversation.id, UserMessage(content="do two things", author=ADA))
    await store.append_message(
        conversation.id,
        AssistantMessage(
            content=[
                ToolCall(id="c1", name="note", arguments={"text": "a"}),
                ToolCall(id="c2", name="wait", arguments={}),
            ],
            stop_reason="tool_use",
        ),
        run_id=run.id,
    )
    await store.append_message(
        conversation.id,
        ToolResultMessage(tool_call_id="c1", tool_name="note", content=[Text(text="noted a")]),
        run_id=run.id,
    )
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=surfaces)

    [recovered] = await runner.recover()

    assert recovered.id == run.id and recovered.outcome == "interrupted"
    history = await stored(store)
    synthetic = history[-1]
    assert isinstance(synthetic, ToolResultMessage)
    assert (synthetic.tool_call_id, synthetic.tool_name) == ("c2", "wait")
    assert synthetic.is_error and synthetic.details == {"interrupted": True}
    assert len([m for m in history if isinstance(m, ToolResultMessage)]) == 2
    [(key, ref, surface)] = surfaces.made
    assert key == KEY and ref == {"name": "thread"}
    assert [f.error_text for f in surface.finished()] == [INTERRUPTED_TEXT]
    assert await runner.recover() == []  # recovered once


# -- what people and operators are told --------------------------------------------------------


async def _errors_of_runs(tmp_path: Path) -> list[str | None]:
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT error FROM runs ORDER BY id")]


async def test_a_person_not_allowed_is_warned_privately_and_nothing_runs(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="never")], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, allowed_users=[BOB.id])
    surface = RecordingSurface()
    assert await runner.submit(incoming("hello"), surface) == "refused"
    [notice] = surface.notices()
    assert notice.level == "warning" and notice.audience == ADA
    assert "allowed_users" in notice.text
    assert model.requests == [] and runner.current_run(KEY) is None


async def test_operators_are_told_of_duplicates_and_stale_stops(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.runner")
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([Reply(text="hi")]))
    message = incoming("hello")
    assert await runner.submit(message, RecordingSurface()) == "started"
    await runner.wait(KEY)
    assert await runner.submit(message, RecordingSurface()) == "duplicate"
    assert f"duplicate delivery {message.delivery_id} dropped" in caplog.messages
    assert runner.stop(KEY, 4242) == "stale"
    assert f"stale stop for run 4242 in {KEY} ignored" in caplog.messages


async def test_reset_says_whether_there_was_anything_to_forget(
    store: SqliteStore, tmp_path: Path
) -> None:
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([Reply(text="hi")]))
    assert await runner.reset(KEY) is False  # never seen
    await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    assert await runner.reset(KEY) is False  # seen, but nothing said yet
    await ask(runner, "hello")
    assert await runner.reset(KEY) is True
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    loaded = await store.load(conversation.id)
    assert loaded.messages == [] and loaded.compaction is not None
    assert loaded.compaction.details == {"reset": True}


async def test_the_reason_a_run_ended_is_recorded_on_it(
    store: SqliteStore, tmp_path: Path, clock: Clock
) -> None:
    def forever(_request: ModelRequest) -> Reply:
        return Reply(tool_calls=[call("note", {"text": "more"})], usage=EXPENSIVE)

    model = ScriptedModel(default=forever, info=info("m"))
    runner = make_runner(
        store,
        tmp_path,
        lambda _id: model,
        tools=[NoteTool()],
        max_turns=1,
        clock=clock,
        budgets=BudgetSettings(conversation_usd_per_day=0.40),
    )
    [limited] = (await ask(runner, "keep going")).finished()
    [refused] = (await ask(runner, "again")).finished()
    errors = await _errors_of_runs(tmp_path)
    assert errors[0] == limited.error_text and errors[0] is not None
    assert "turn limit" in errors[0]
    assert errors[1] == refused.error_text and errors[1] is not None
    assert "conversation_usd_per_day" in errors[1]


async def test_a_run_interrupted_by_a_restart_says_so_on_its_record(
    store: SqliteStore, tmp_path: Path
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"n": 1}, owner={}
    )
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=surfaces)
    [record] = await runner.recover()
    await runner.wait(KEY)
    assert record.error == "interrupted by a restart"
    assert await _errors_of_runs(tmp_path) == ["interrupted by a restart"]
    [(_key, _ref, surface)] = surfaces.made
    [finished] = surface.finished()
    assert finished.final_text == "" and finished.run_id == record.id


async def test_one_model_is_made_per_model_id_and_reused_across_runs(
    store: SqliteStore, tmp_path: Path
) -> None:
    made: list[str] = []

    def models(model_id: str) -> ScriptedModel:
        made.append(model_id)
        return ScriptedModel([Reply(text="one"), Reply(text="two")], info=info(model_id))

    runner = make_runner(store, tmp_path, models, model="m")
    await ask(runner, "first")
    [second] = (await ask(runner, "second")).finished()
    assert made == ["m"] and second.final_text == "two"


async def test_a_failure_inside_a_run_is_logged_with_its_reference_and_the_run_id(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_tools(_channel: str) -> Sequence[AnyTool]:
        raise RuntimeError("tool set broke")

    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path),
        model_factory=lambda _id: ScriptedModel([Reply(text="never")], info=info("m")),
        toolset_factory=broken_tools,
        platform_rules="Plain text only.",
    )
    surface = await ask(runner, "hello")
    [finished] = surface.finished()
    assert finished.outcome == "error" and finished.reference is not None
    assert finished.conversation_key == KEY
    assert finished.run_id > 0
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        [(run_id,)] = db.execute("SELECT id FROM runs").fetchall()
    assert finished.run_id == run_id
    failure = f"run in {KEY} failed (reference {finished.reference})"
    assert failure in caplog.messages


async def test_messages_dropped_by_a_stop_are_named_as_warnings_to_everyone_concerned(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[tool])
    first, second = RecordingSurface(), RecordingSurface()
    await runner.submit(incoming("wait for it"), first)
    await asyncio.wait_for(tool.started.wait(), 5)
    assert await runner.submit(incoming("and this too", author=BOB), second) == "steered"
    runner.stop(KEY, by=ADA)
    await runner.wait(KEY)

    [run_notice] = [n for n in first.notices() if "will not be answered" in n.text]
    assert run_notice.level == "warning" and run_notice.audience is None
    assert run_notice.text.startswith("Stopped by Ada. These messages will not be answered:")
    assert run_notice.text.endswith("Send them again if you still need an answer.")
    dropped = [n for n in second.notices() if "won't answer" in n.text]
    assert [(n.level, n.audience) for n in dropped] == [("warning", BOB)]


async def test_messages_left_in_the_inbox_by_a_restart_are_answered_and_logged(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.runner")
    accepted = await store.accept_delivery(
        KEY,
        UserMessage(content="still there?", author=ADA),
        channel_key=CHANNEL,
        delivery_id="left-behind",
        surface_ref={"name": "thread"},
    )
    assert accepted is not None
    surfaces = RecordingSurfaces()
    model = ScriptedModel([Reply(text="yes")], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, surfaces=surfaces)
    assert await runner.recover() == []
    await runner.wait(KEY)
    assert f"answering messages left in {KEY}'s inbox" in caplog.messages
    [(_key, _ref, surface)] = surfaces.made
    assert [f.final_text for f in surface.finished()] == ["yes"]


async def test_an_overflowing_conversation_is_announced_as_information(
    store: SqliteStore, tmp_path: Path
) -> None:
    replies: list[Reply | AssistantMessage] = [
        AssistantMessage(
            stop_reason="error", error_kind="context_overflow", error_message="prompt is too long"
        )
    ]

    def reply(request: ModelRequest) -> Reply | AssistantMessage:
        if _is_summary_request(request):
            return Reply(text="## Goal\nsummary")
        return replies.pop() if replies else Reply(text="fits now")

    model = ScriptedModel(default=reply, info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model)
    surface = await ask(runner, "hello")
    notices = [n for n in surface.notices() if "got long" in n.text]
    assert [(n.text, n.level, n.audience) for n in notices] == [
        ("This conversation got long; summarising it.", "info", None)
    ]
    assert [f.final_text for f in surface.finished()] == ["fits now"]


class GatedSurface(RecordingSurface):
    """Shows nothing until the gate opens: a slow platform."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.gate = asyncio.Event()

    async def emit(self, event: Any) -> None:
        await self.gate.wait()
        await super().emit(event)


async def test_waiting_covers_a_slow_surface_even_after_another_one_finished(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="answered")], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model, allowed_users=[ADA.id])
    slow = GatedSurface()
    assert await runner.submit(incoming("hello"), slow) == "started"
    # The run's answer is written while it waits for the slow surface (the runner offers no
    # event for "answered, not yet shown": `wait` covers both, which is what is tested here).
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    while await store.message_count(conversation.id) < 2:  # noqa: ASYNC110 (the question, the answer)
        await asyncio.sleep(0.01)
    assert runner.is_running(KEY)  # closed only once its end is shown
    # Another person's message in the same thread is refused, and that surface is done.
    refused = RecordingSurface()
    assert await runner.submit(incoming("me too", author=BOB), refused) == "refused"
    assert len(refused.notices()) == 1

    waiter = asyncio.ensure_future(runner.wait(KEY))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiter.done()  # the answer is not shown yet
    slow.gate.set()
    await waiter
    assert [f.final_text for f in slow.finished()] == ["answered"]


class GatedSurfaces(RecordingSurfaces):
    """Restores earlier runs' surfaces as slow ones sharing one gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> RecordingSurface:
        surface = GatedSurface()
        surface.gate = self.gate
        self.made.append((conversation_key, ref, surface))
        return surface


async def test_waiting_after_recovery_covers_the_interrupted_notice_being_shown(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"n": 1}, owner={}
    )
    surfaces = GatedSurfaces()
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=surfaces)
    # A platform slower than recovery waits for: recovery closes the run and returns while
    # the thread is still being told (its bound, 30 s in production, made short here).
    monkeypatch.setattr("bots.runner.recovery.FINAL_SHOWN_WAIT_S", 0.01)
    [recovered] = await runner.recover()
    assert recovered.outcome == "interrupted"
    [(_key, _ref, surface)] = surfaces.made
    assert surface.finished() == []

    waiter = asyncio.ensure_future(runner.wait(KEY))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiter.done()  # the thread has not been told yet
    surfaces.gate.set()
    await waiter
    assert [f.error_text for f in surface.finished()] == [INTERRUPTED_TEXT]


class MovingSurface(RecordingSurface):
    """A surface whose address changes once it has shown something (a posted message)."""

    @property
    def ref(self) -> dict[str, Any]:
        return {"name": self.name, "shown": len(self.events)}


class MovingSurfaces(RecordingSurfaces):
    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> RecordingSurface:
        surface = MovingSurface("moving")
        self.made.append((conversation_key, ref, surface))
        return surface


async def test_where_a_recovered_run_was_last_shown_is_recorded_on_it(
    store: SqliteStore, tmp_path: Path
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"n": 1}, owner={}
    )
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=MovingSurfaces())
    await runner.recover()
    await runner.wait(KEY)
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        [(ref,)] = db.execute("SELECT surface_ref FROM runs WHERE id = ?", (run.id,)).fetchall()
    assert json.loads(ref) == {"name": "moving", "shown": 1}


async def test_a_message_left_in_the_inbox_with_nowhere_to_show_is_still_answered(
    store: SqliteStore, tmp_path: Path
) -> None:
    accepted = await store.accept_delivery(
        KEY,
        UserMessage(content="anyone?", author=ADA),
        channel_key=CHANNEL,
        delivery_id="no-surface",
    )
    assert accepted is not None
    model = ScriptedModel([Reply(text="here")], info=info("m"))
    runner = make_runner(store, tmp_path, lambda _id: model)  # no way to restore surfaces
    await runner.recover()
    await runner.wait(KEY)
    assert [m.text() for m in await stored(store)] == ["anyone?", "here"]
    assert await store.pending_conversations() == []


# -- accepting a message ------------------------------------------------------------------------


async def test_a_new_conversation_keeps_the_title_it_came_with(
    store: SqliteStore, tmp_path: Path
) -> None:
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([Reply(text="hi")]))
    titled = dataclasses.replace(incoming("hello"), title="#deploys")
    await runner.submit(titled, RecordingSurface())
    await runner.wait(KEY)
    conversation = await store.get_conversation(KEY)
    assert conversation is not None and conversation.title == "#deploys"


class RefusesToAccept(SqliteStore):
    """A store that cannot take a new message: `failure` is what its write raises."""

    failure: Exception = sqlite3.OperationalError("database or disk is full")

    async def accept_delivery(self, *args: Any, **kwargs: Any) -> Any:
        raise self.failure


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            sqlite3.OperationalError("database or disk is full"),
            "I couldn't save your message (the disk is full; reference ",
        ),
        (RuntimeError("a bug"), "Something went wrong on my side (reference "),
    ],
)
async def test_a_message_that_could_not_be_stored_is_answered_with_an_error_saying_why(
    tmp_path: Path, failure: Exception, said: str
) -> None:
    store = await RefusesToAccept.open(tmp_path / "teammate.db")
    store.failure = failure
    try:
        runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([]))
        surface = RecordingSurface()
        with pytest.raises(type(failure)):
            await runner.submit(incoming("hello"), surface)
        [notice] = surface.notices()
        assert (notice.level, notice.audience) == ("error", ADA)
        assert notice.text.startswith(said)
    finally:
        await store.close()


# -- sharing the slots --------------------------------------------------------------------------


async def test_a_person_at_their_run_limit_waits_while_others_are_answered(
    store: SqliteStore, tmp_path: Path
) -> None:
    third_key = f"{CHANNEL}:1700000000.000300"
    tool = WaitTool()

    def by_request(request: ModelRequest) -> Reply:
        asked = request.messages[-1].text()
        if "hold" in asked:
            return Reply(tool_calls=[call("wait")])
        return Reply(text=f"answered {asked.split()[-1]}")

    model = ScriptedModel(default=by_request)
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[tool], max_runs_per_user=1)
    await runner.submit(incoming("hold"), RecordingSurface())
    await asyncio.wait_for(tool.started.wait(), 5)
    adas_second = RecordingSurface()
    await runner.submit(incoming("second", key=OTHER_KEY), adas_second)
    bobs = await ask_as(runner, BOB, "third", third_key)

    # Bob was answered while Ada's second thread waits for her first run to end.
    assert [f.final_text for f in bobs.finished()] == ["answered third"]
    assert runner.is_running(OTHER_KEY) and runner.current_run(OTHER_KEY) is None
    assert not any("second" in r.messages[-1].text() for r in model.requests)
    runner.stop(KEY)
    await runner.wait(OTHER_KEY)
    assert [f.final_text for f in adas_second.finished()] == ["answered second"]


async def ask_as(
    runner: ConversationRunner, author: Author, text: str, key: str
) -> RecordingSurface:
    surface = RecordingSurface()
    await runner.submit(incoming(text, key=key, author=author), surface)
    await runner.wait(key)
    return surface


# -- shutting down ------------------------------------------------------------------------------


async def test_shutting_down_leaves_a_queued_message_for_the_restart_and_starts_nothing(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")]), Reply(text="too late")])
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[tool])
    await runner.submit(incoming("hold"), RecordingSurface())
    await asyncio.wait_for(tool.started.wait(), 5)
    bobs = RecordingSurface()
    assert await runner.submit(incoming("later", author=BOB), bobs) == "steered"
    await bobs.wait_for(lambda s: len(s.notices()) == 1)  # shown by its feed's own task
    [queued] = bobs.notices()
    assert (queued.text, queued.level, queued.audience) == (QUEUED_TEXT, "info", BOB)

    await runner.close()

    assert len(model.requests) == 1  # no new run once closing
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    assert await store.pending_conversations() == [conversation.id]  # answered after restart


async def test_a_run_that_had_answered_when_it_died_is_closed_as_done_and_its_answer_shown(
    store: SqliteStore, tmp_path: Path
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"name": "thread"}, owner={}
    )
    await store.append_message(conversation.id, UserMessage(content="hello", author=ADA))
    answer = AssistantMessage(content=[Text(text="Hello, Ada.")], stop_reason="stop")
    await store.append_message(conversation.id, answer, run_id=run.id)
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=surfaces)

    [recovered] = await runner.recover()
    await runner.wait(KEY)

    assert (recovered.id, recovered.outcome, recovered.error) == (run.id, "done", None)
    [(_key, _ref, surface)] = surfaces.made
    [finished] = surface.finished()
    assert (finished.outcome, finished.final_text, finished.error_text) == (
        "done",
        "Hello, Ada.",
        None,
    )
    assert await store.running_runs() == []


class LosesTheAnswer(SqliteStore):
    """A store whose disk fills up just as the model's answer is to be saved."""

    async def append_message(self, conversation_id: int, message: Message, **kwargs: Any) -> Any:
        if isinstance(message, AssistantMessage):
            raise OSError("No space left on device")
        return await super().append_message(conversation_id, message, **kwargs)


async def test_an_answer_that_could_not_be_saved_says_so_with_a_reference_kept_on_the_run(
    tmp_path: Path,
) -> None:
    store = await LosesTheAnswer.open(tmp_path / "teammate.db")
    try:
        runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([Reply(text="hi")]))
        surface = await ask(runner, "hello")
        [finished] = surface.finished()
        reference = finished.reference
        assert finished.outcome == "error" and reference
        assert finished.error_text == (
            f"I couldn't save this answer (the disk is full; reference {reference}). "
            "What was said before is kept; ask again in a minute."
        )
        # The operator finds the run by the reference the person quotes.
        assert await _errors_of_runs(tmp_path) == [f"unexpected failure {reference}"]
    finally:
        await store.close()


async def test_a_message_the_run_read_just_before_a_stop_is_delivered_not_dropped(
    store: SqliteStore, tmp_path: Path
) -> None:
    gate = GateTool()
    runner: ConversationRunner | None = None

    def stop_as_the_model_is_asked(request: ModelRequest) -> Reply:
        # The loop has just taken Bob's message in; the runner has not recorded it yet.
        assert runner is not None and runner.stop(KEY, by=ADA) == "stopped"
        return Reply(text="never shown", latency_s=0.001)  # a model awaits before answering

    model = ScriptedModel([Reply(tool_calls=[call("gate")]), stop_as_the_model_is_asked])
    runner = make_runner(store, tmp_path, lambda _id: model, tools=[gate])
    adas = RecordingSurface()
    await runner.submit(incoming("first"), adas)
    await asyncio.wait_for(gate.entered.wait(), 5)
    bobs = RecordingSurface()
    await runner.submit(incoming("second", author=BOB), bobs)
    gate.opened.set()
    await runner.wait(KEY)

    # Read by the run before the stop: answered as read, never told it was dropped.
    assert [n.text for n in bobs.notices()] == [QUEUED_TEXT, DELIVERED_TEXT]
    [finished] = adas.finished()
    assert (finished.outcome, finished.error_text) == ("aborted", "Stopped by Ada.")
    assert any("second" in m.text() for m in await stored(store) if isinstance(m, UserMessage))
    assert await store.pending_conversations() == []
    # Recorded as part of the run that read it, as the run's own message is.
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        runs = db.execute("SELECT id FROM runs").fetchall()
        owners = db.execute("SELECT DISTINCT run_id FROM messages").fetchall()
    assert runs == [(finished.run_id,)] and owners == runs


async def test_a_message_too_long_for_the_model_is_refused_with_a_warning_to_its_sender(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([], info=info("small", window=1_000))
    runner = make_runner(store, tmp_path, lambda _id: model)
    surface = await ask(runner, "word " * 2_000)
    [notice] = surface.notices()
    assert (notice.level, notice.audience) == ("warning", ADA)
    assert notice.text.startswith("This message is too long for the model (about ")
    assert "it reads at most about 500 at once" in notice.text
    assert model.requests == []


async def test_a_runs_start_and_end_name_the_run_recorded_in_the_store(
    store: SqliteStore, tmp_path: Path
) -> None:
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel([Reply(text="hi")]))
    await ask(runner, "warm-up")  # so the run asked about is not the first id by chance
    surface = await ask(runner, "hello")
    [started] = [e for e in surface.events if isinstance(e, RunStarted)]
    [finished] = surface.finished()
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        [(last_run,)] = db.execute("SELECT max(id) FROM runs").fetchall()
    assert started.run_id == finished.run_id == last_run == 2


@pytest.mark.parametrize(("spare", "answered"), [(0, True), (-1, False)])
async def test_a_message_is_read_if_it_fits_the_model_to_the_token(
    store: SqliteStore, tmp_path: Path, spare: int, answered: bool
) -> None:
    message = incoming("word " * 400)
    size = compaction.estimate_tokens(await user_message(message, tmp_path))
    # With the default reserve larger than this window, the room is half the window.
    model = ScriptedModel([Reply(text="read it")], info=info("small", window=2 * (size + spare)))
    runner = make_runner(store, tmp_path, lambda _id: model)
    surface = RecordingSurface()
    await runner.submit(message, surface)
    await runner.wait(KEY)
    assert [f.final_text for f in surface.finished()] == (["read it"] if answered else [])
    assert len(model.requests) == (1 if answered else 0)


async def test_a_run_that_died_after_saying_something_and_calling_a_tool_is_interrupted(
    store: SqliteStore, tmp_path: Path
) -> None:
    # Text before a tool call is not an answer: the call never got its result.
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref={"name": "thread"}, owner={}
    )
    await store.append_message(conversation.id, UserMessage(content="check it", author=ADA))
    checking = AssistantMessage(
        content=[Text(text="Let me check."), ToolCall(id="c1", name="note", arguments={})],
        stop_reason="tool_use",
    )
    await store.append_message(conversation.id, checking, run_id=run.id)
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, lambda _id: ScriptedModel(), surfaces=surfaces)

    [recovered] = await runner.recover()

    assert recovered.outcome == "interrupted"
    [(_key, _ref, surface)] = surfaces.made
    assert [(f.final_text, f.error_text) for f in surface.finished()] == [("", INTERRUPTED_TEXT)]
