"""Two instances on one PostgreSQL database, pinned: what people are told when a stop or a
message reaches the instance that does not run the conversation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.models.scripted import Reply, ScriptedModel, call
from storage.postgres import PostgresStore
from tests.bots.runner_helpers import BOB, KEY, incoming
from tests.fakes.recording_surface import RecordingSurface
from tests.storage.test_instances_runner import (
    LIMIT_S,
    GateTool,
    make_runner,
    started,
    stores,  # noqa: F401  (the fixture)
)


async def test_a_stop_from_another_instance_names_who_stopped_the_run(
    stores: tuple[PostgresStore, PostgresStore],  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="never")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate]))
    b = await started(make_runner(stores[1], tmp_path / "b", ScriptedModel([]), [gate]))
    try:
        ada = RecordingSurface("ada")
        await a.submit(incoming("work"), ada)
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
        run_id = a.current_run(KEY)

        assert b.stop(KEY, run_id, by=BOB) == "stopped"  # Bob's Stop button, shown by B
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        [finished] = ada.finished()
        assert (finished.outcome, finished.error_text) == ("aborted", "Stopped by Bob.")
    finally:
        await a.close()
        await b.close()
