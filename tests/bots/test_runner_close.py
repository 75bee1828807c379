"""Shutting the runner down: `close()` stops the runs, returns once they recorded their outcome,
and leaves messages queued behind them in the store for the next start."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bots.runner import QUEUED_TEXT
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import BOB, KEY, incoming, make_runner
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces

# close() is given far more time than it should ever need; it must not use it up waiting for
# a message that is left for the restart. The outer bound is generous (no timing is measured):
# it only tells "returned once the run ended" from "sat out its whole timeout".
CLOSE_TIMEOUT_S = 600.0
OUTER_BOUND_S = 20.0


async def test_close_returns_once_the_stopped_run_ended_and_keeps_the_queued_message(
    store: SqliteStore, tmp_path: Path
) -> None:
    gate = GateTool()
    model = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="too late")])
    runner = make_runner(store, tmp_path, model, tools=[gate])
    adas = RecordingSurface("ada")
    await runner.submit(incoming("hold"), adas)
    await asyncio.wait_for(gate.entered.wait(), 5)
    bobs = RecordingSurface("bob")
    assert await runner.submit(incoming("later", author=BOB), bobs) == "steered"

    await asyncio.wait_for(runner.close(timeout_s=CLOSE_TIMEOUT_S), OUTER_BOUND_S)

    # The stopped run recorded and showed its end; nothing new was started for Bob.
    assert not runner.is_running(KEY)
    assert await store.running_runs() == []
    [finished] = adas.finished()
    assert finished.outcome == "aborted" and adas.closed == 1
    assert len(model.requests) == 1
    # Bob was told his message is queued, and his surface is let go (not left waiting).
    assert [n.text for n in bobs.notices()] == [QUEUED_TEXT]
    assert bobs.finished() == [] and bobs.closed == 1
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    [left] = await store.pending(conversation.id)
    assert left.message.text().endswith("later")

    # The next start answers it, where Bob asked: nothing lost.
    surfaces = RecordingSurfaces()
    restarted_model = ScriptedModel([Reply(text="answered later")])
    restarted = make_runner(store, tmp_path, restarted_model, surfaces=surfaces)
    await restarted.recover()
    await restarted.wait_all()
    [(key, ref, shown)] = surfaces.made
    assert key == KEY and ref["name"] == "bob"
    assert [f.final_text for f in shown.finished()] == ["answered later"]
    assert restarted_model.requests[-1].messages[-1].text().endswith("later")
    assert await store.pending(conversation.id) == []
    await restarted.close()
