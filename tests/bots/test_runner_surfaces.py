"""What adapters need from the runner's contract (issue 8): slow surfaces never delay saving or
other conversations, a run's surface location is stored as it changes and used after a restart,
files out, and messages accepted before a crash are answered after it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.surface.contract import FileOut, SurfaceEvent
from core.messages import UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import (
    ADA,
    CHANNEL,
    KEY,
    SleepTool,
    history,
    incoming,
    make_runner,
    roles,
)
from tests.fakes.recording_surface import HoldingTheEnd, RecordingSurface, RecordingSurfaces


class BackingOff(RecordingSurface):
    """A surface whose platform answers 429: every emit sleeps until the limit lifts."""

    def __init__(self) -> None:
        super().__init__("slow")
        self.limit_lifted = asyncio.Event()

    async def emit(self, event: SurfaceEvent) -> None:
        await self.limit_lifted.wait()
        await super().emit(event)


async def until(check: Callable[[], Awaitable[bool]], limit_s: float = 5.0) -> None:
    """Wait until `check()` holds: the store has no change notification to wait on."""
    for _ in range(int(limit_s / 0.01)):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def _no_run_running(store: SqliteStore) -> bool:
    return not await store.running_runs()


async def test_a_slow_surface_delays_neither_saving_nor_other_conversations(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel(
        default=lambda r: (
            Reply(text="answer")
            if roles(r.messages)[-1] == "tool_result"
            else Reply(tool_calls=[call("sleep", {"seconds": 0})])
        )
    )
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    slow = BackingOff()
    fast = RecordingSurface("fast")
    await runner.submit(incoming("slow one"), slow)
    other = f"{CHANNEL}:other"
    await runner.submit(incoming("fast one", key=other), fast)
    await runner.wait(other)  # the other conversation is answered and shown meanwhile
    assert [f.outcome for f in fast.finished()] == ["done"]
    done = ["user", "assistant", "tool_result", "assistant"]

    async def saved() -> bool:
        return roles(await history(store)) == done

    await until(saved)
    # The slow surface has shown nothing, yet its run is complete and saved; it is closed in
    # the store only once its end is shown (killed now, the next start would show it).
    assert slow.events == []
    assert not await _no_run_running(store)
    slow.limit_lifted.set()
    await runner.wait(KEY)
    assert await _no_run_running(store)
    assert slow.types()[0] == "run_started" and slow.types()[-1] == "run_finished"
    assert slow.closed == 1


class PostsOnce(RecordingSurface):
    """A surface that learns where it posted (a Slack ts) after showing the run's start."""

    def __init__(self) -> None:
        super().__init__("posting")
        self.ts: str | None = None

    @property
    def ref(self) -> dict[str, Any]:
        return {"surface": "recording", "name": self.name, "ts": self.ts}

    async def emit(self, event: SurfaceEvent) -> None:
        if event.type == "run_started":
            self.ts = "1700000000.000200"
        await super().emit(event)


async def a_run_in_a_tool(store: SqliteStore, tmp_path: Path) -> ConversationRunner:
    """A process running an hour-long tool, its surface's location stored: the runner, for
    the test to drop (the process died) and close at the end."""
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 3600})])])
    first = make_runner(store, tmp_path, model, tools=[SleepTool()])
    surface = PostsOnce()
    await first.submit(incoming("work for an hour"), surface)
    await surface.wait_for(lambda s: s.tool_starts())

    async def ref_stored() -> bool:
        return (await store.running_runs())[0].surface_ref.get("ts") is not None

    await until(ref_stored)
    return first


async def test_a_surface_location_learnt_after_posting_is_used_after_a_restart(
    store: SqliteStore, tmp_path: Path
) -> None:
    first = await a_run_in_a_tool(store, tmp_path)
    # A second process on the same database, after this one died (same owner: not alive).
    surfaces = RecordingSurfaces()
    restarted = make_runner(store, tmp_path, ScriptedModel(), surfaces=surfaces)
    [recovered] = await restarted.recover()
    await restarted.wait_all()
    [(key, ref, shown)] = surfaces.made
    assert key == KEY and ref["ts"] == "1700000000.000200"
    [finished] = shown.finished()
    assert finished.outcome == "interrupted" and finished.run_id == recovered.id
    await first.close(timeout_s=5)


class ReportParams(BaseModel):
    name: str


class ReportTool(AgentTool[ReportParams]):
    name = "report"
    label = "Report"
    description = "Write a report file to attach."
    parameters = ReportParams

    async def execute(self, call_id: str, params: ReportParams, ctx: ToolContext) -> ToolResult:
        (ctx.workspace / params.name).write_text("the report")
        offered = [
            {"path": params.name, "name": "Report.txt", "mime_type": "text/plain"},
            {"path": "../outside.txt", "name": "nope"},
            {"path": "missing.txt"},
        ]
        return ToolResult.text("written", details={"files_out": offered})


async def test_files_a_tool_offers_reach_the_surface_when_inside_the_workspace(
    store: SqliteStore, tmp_path: Path
) -> None:
    (tmp_path / "workspaces").mkdir()
    (tmp_path / "workspaces" / "outside.txt").write_text("secret")
    model = ScriptedModel([Reply(tool_calls=[call("report", {"name": "r.txt"})]), Reply(text="ok")])
    runner = make_runner(store, tmp_path, model, tools=[ReportTool()])
    surface = RecordingSurface()
    await runner.submit(incoming("report please"), surface)
    await runner.wait(KEY)
    files = [e for e in surface.events if isinstance(e, FileOut)]
    assert [(f.name, f.mime_type, f.path, f.data) for f in files] == [
        ("Report.txt", "text/plain", "r.txt", b"the report")
    ]
    types = surface.types()
    assert types.index("file_out") == types.index("tool_execution_end") + 1


async def test_messages_accepted_before_a_crash_are_answered_after_it(
    store: SqliteStore, tmp_path: Path
) -> None:
    # A process accepted this message and died before any run delivered it.
    accepted = await store.accept_delivery(
        KEY,
        UserMessage(content="[Ada] are you there?", author=ADA),
        channel_key=CHANNEL,
        delivery_id="Ev-before-crash",
        surface_ref={"surface": "recording", "name": "before-crash"},
    )
    assert accepted is not None
    model = ScriptedModel([Reply(text="yes, back now")])
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, model, surfaces=surfaces)
    assert await runner.recover() == []
    await runner.wait_all()
    [(key, ref, surface)] = surfaces.made
    assert key == KEY and ref["name"] == "before-crash"
    assert [f.final_text for f in surface.finished()] == ["yes, back now"]
    assert roles(await history(store)) == ["user", "assistant"]
    assert await store.pending(accepted.conversation.id) == []
    retried = Incoming(
        conversation_key=KEY,
        channel_key=CHANNEL,
        author=ADA,
        text="are you there?",
        delivery_id="Ev-before-crash",
        timestamp=1_796_000_000.0,
    )
    assert await runner.submit(retried, RecordingSurface()) == "duplicate"


async def test_a_restart_that_dies_showing_a_recovered_end_leaves_it_for_the_next(
    store: SqliteStore, tmp_path: Path
) -> None:
    first = await a_run_in_a_tool(store, tmp_path)
    # The first process died; the second starts, and dies while showing that run's end.
    dying = HoldingTheEnd()
    second = make_runner(store, tmp_path, ScriptedModel(), surfaces=dying)
    recovering = asyncio.ensure_future(second.recover())
    await asyncio.wait_for(dying.reached_the_end.wait(), 30)
    recovering.cancel()
    await asyncio.gather(recovering, return_exceptions=True)
    # Not shown, so not closed: the third process shows it.
    surfaces = RecordingSurfaces()
    third = make_runner(store, tmp_path, ScriptedModel(), surfaces=surfaces)
    [recovered] = await third.recover()
    await third.wait_all()
    [(key, ref, shown)] = surfaces.made
    assert key == KEY and ref["ts"] == "1700000000.000200"
    [finished] = shown.finished()
    assert finished.outcome == "interrupted" and finished.run_id == recovered.id
    assert await store.running_runs() == []
    assert roles(await history(store)) == ["user", "assistant", "tool_result"]
    await first.close(timeout_s=5)


async def test_a_message_arriving_while_recovery_shows_a_dead_run_waits_for_it_to_close(
    store: SqliteStore, tmp_path: Path
) -> None:
    first = await a_run_in_a_tool(store, tmp_path)
    slow = HoldingTheEnd()  # here: slow to show the end, then it gets through
    model = ScriptedModel([Reply(text="the new answer")])
    second = make_runner(store, tmp_path, model, surfaces=slow)
    recovering = asyncio.ensure_future(second.recover())
    await asyncio.wait_for(slow.reached_the_end.wait(), 30)
    # A new message in the same conversation while the dead run's end is being shown: it is
    # answered only once that run is closed (else its answer would end the history the dead
    # run's end is read from, should this process die too).
    fresh = RecordingSurface("fresh")
    await second.submit(incoming("are you back?"), fresh)
    await asyncio.sleep(0.2)
    assert model.requests == [] and len(await store.running_runs()) == 1
    slow.lift.set()
    await recovering
    await second.wait_all()
    assert [f.final_text for f in fresh.finished()] == ["the new answer"]
    assert roles(await history(store)) == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
    ]
    await first.close(timeout_s=5)
