"""A run that ends aborted shows why, where it was shown and on its record: the model's own
reason when the model ended the reply, the stop's reason when someone stopped it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from core.loop import MODEL_ABORTED_TEXT
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import ADA, KEY, incoming, make_runner
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface


def _errors_of_runs(tmp_path: Path) -> list[str | None]:
    with sqlite3.connect(f"file:{tmp_path / 'teammate.db'}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT error FROM runs ORDER BY id")]


async def test_a_reply_the_model_ended_aborted_shows_why_the_run_ended(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="half an ans", stop_reason="aborted")])
    runner = make_runner(store, tmp_path, model)
    surface = RecordingSurface()
    await runner.submit(incoming("hello"), surface)
    await runner.wait(KEY)
    [finished] = surface.finished()
    assert (finished.outcome, finished.error_text) == ("aborted", MODEL_ABORTED_TEXT)
    assert _errors_of_runs(tmp_path) == [MODEL_ABORTED_TEXT]


async def test_a_stopped_run_still_shows_who_stopped_it(store: SqliteStore, tmp_path: Path) -> None:
    gate = GateTool()
    model = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="never")])
    runner = make_runner(store, tmp_path, model, tools=[gate])
    surface = RecordingSurface()
    await runner.submit(incoming("hold"), surface)
    await asyncio.wait_for(gate.entered.wait(), 5)
    assert runner.stop(KEY, by=ADA) == "stopped"
    await runner.wait(KEY)
    [finished] = surface.finished()
    assert (finished.outcome, finished.error_text) == ("aborted", "Stopped by Ada.")
    assert _errors_of_runs(tmp_path) == ["Stopped by Ada."]
