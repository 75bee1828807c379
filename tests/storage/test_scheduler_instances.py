"""Two Teammate instances on one database, each with its own scheduler: every due run starts
exactly once, whichever instance wins its claim (on SQLite too: two stores on one file)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bots.features.schedules import NewSchedule
from core.models.scripted import Reply, ScriptedModel
from tests.bots.scheduling_helpers import wire
from tests.storage.conftest import Backend, FakeClock


async def test_two_instances_racing_for_due_runs_start_each_once(
    backend: Backend, clock: FakeClock, tmp_path: Path
) -> None:
    async with backend.open(clock) as one, backend.open(clock) as two:
        first = wire(one, tmp_path / "one", ScriptedModel(default=Reply(text="ok")), clock)
        second = wire(two, tmp_path / "two", ScriptedModel(default=Reply(text="ok")), clock)
        made = [
            await first.schedules.create(
                f"slack:T1:C{i}",
                NewSchedule(f"task {i}", cron="0 9 * * *"),
                by_id="U1",
                by_name="Ada",
            )
            for i in range(8)
        ]
        clock.advance(2 * 86400)  # every schedule is due (twice over)
        for _ in range(3):  # several rounds of both instances ticking at once
            await asyncio.gather(first.scheduler.tick(), second.scheduler.tick())
        posted = first.starter.posted + second.starter.posted
        assert sorted(p.channel_key for p in posted) == sorted(s.channel_key for s in made)
        await asyncio.gather(first.runner.wait_all(), second.runner.wait_all())
        await first.runner.close()
        await second.runner.close()
