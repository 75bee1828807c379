"""A schedule run's claim is aged on the database's clock, never on an instance's own
(issue 24, R5): two instances whose clocks disagree by minutes, or a platform slow to post a
thread, never make a live claim look abandoned, so the thread is posted once. On both
backends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from bots.features.scheduler import RETRY_AFTER_S, START_TIMEOUT_S, Scheduler, StartedThread
from bots.features.schedules import NewSchedule
from core.models.scripted import Reply, ScriptedModel
from storage.base import ConversationStore
from tests.bots.scheduling_helpers import RecordingStarter, Wired, wire
from tests.storage.conftest import Backend

CHANNEL = "slack:T1:C1"
SKEW_S = 300.0  # more than the old 120 s retry window


class Skewed:
    """A host's clock, some seconds off true time."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def __call__(self) -> float:
        return time.time() + self.offset


class HeldStarter(RecordingStarter):
    """Posts the thread only once let go (a platform backing off from 429s)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        self.entered.set()
        await self.release.wait()
        return await super().start_thread(channel_key, text, for_user=for_user)


@asynccontextmanager
async def instance(
    backend: Backend,
    tmp_path: Path,
    clock: Callable[[], float],
    start_timeout_s: float = START_TIMEOUT_S,
    retry_after_s: float = RETRY_AFTER_S,
) -> AsyncIterator[Wired]:
    """One Teammate instance on the shared database: its store, runner and scheduler run on
    this host's clock; the scheduler ages claims on the store's `now()` (its default)."""
    async with backend.open(clock) as store:
        wired = wire(store, tmp_path, ScriptedModel(default=Reply(text="ok")), clock)
        wired.scheduler = Scheduler(
            wired.runner,
            wired.runner.settings,
            clock=clock,
            start_timeout_s=start_timeout_s,
            retry_after_s=retry_after_s,
        )
        try:
            yield wired
        finally:
            await wired.runner.close()


async def one_off_due_soon(wired: Wired, clock: Skewed) -> int:
    """A one-off run two minutes from now (on `clock`); due once the clock moves 3 minutes."""
    due = time.strftime("%Y-%m-%d %H:%M", time.gmtime(clock() + 120))
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("Post the weekly report", at=due), by_id="U7", by_name="Sam"
    )
    return made.id


async def test_instances_whose_clocks_disagree_post_a_slow_thread_once(
    backend: Backend, tmp_path: Path
) -> None:
    # SQLite runs on one host, so its instances share a clock; only PostgreSQL's can differ.
    ahead = Skewed(SKEW_S if backend.name == "postgres" else 0.0)
    scheduler_ahead = Skewed(SKEW_S)
    true_time = Skewed(0.0)
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(backend, tmp_path, true_time))
        b = await stack.enter_async_context(instance(backend, tmp_path / "b", ahead))
        b.scheduler = Scheduler(b.runner, b.runner.settings, clock=scheduler_ahead)
        schedule_id = await one_off_due_soon(a, true_time)
        slow, other = HeldStarter(), RecordingStarter()
        a.scheduler.add_platform("slack", slow)
        b.scheduler.add_platform("slack", other)

        true_time.offset = 180.0  # the run falls due for A
        first = asyncio.create_task(a.scheduler.tick())
        await asyncio.wait_for(slow.entered.wait(), 10)  # A claimed it and is still posting
        # B, minutes ahead, looks for abandoned claims while A is still posting.
        assert await b.scheduler.tick() == []
        slow.release.set()
        assert await asyncio.wait_for(first, 10) == [schedule_id]
        await a.runner.wait_all()

    assert len(slow.posted) == 1
    assert other.posted == []


async def test_a_start_that_outlasts_its_timeout_is_retried_once_the_claim_has_aged(
    backend: Backend, tmp_path: Path
) -> None:
    clock = Skewed(0.0)
    async with instance(backend, tmp_path, clock, start_timeout_s=0.3, retry_after_s=1.0) as a:
        schedule_id = await one_off_due_soon(a, clock)
        hanging = HeldStarter()
        a.scheduler.add_platform("slack", hanging)
        clock.offset = 180.0
        started = time.monotonic()
        assert await a.scheduler.tick() == []  # the post gave up after its timeout
        assert time.monotonic() - started < 5
        assert await a.scheduler.tick() == []  # the claim is not yet old enough to retry
        hanging.release.set()
        await asyncio.sleep(1.1)
        assert await a.scheduler.tick() == [schedule_id]
        await a.runner.wait_all()
    assert len(hanging.posted) == 1


def test_a_claim_must_outlive_the_longest_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outlive"):
        Scheduler(None, None, start_timeout_s=5, retry_after_s=5)  # type: ignore[arg-type]


async def test_the_store_tells_its_database_time(store: ConversationStore) -> None:
    before = time.time()
    told = await store.now()
    # SQLite's is the store's own clock (a fake one here); PostgreSQL's is the server's.
    if type(store).__name__ == "PostgresStore":
        assert before - 5 < told < time.time() + 5
    else:
        assert told == 1_700_000_000.0
