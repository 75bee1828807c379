"""What other instances say reaches this one once each, in order, and a flood that overflows
the waiting queue is told as a `Resync` (the runner then looks at everything again) instead of
being lost without a word or ending the notifications."""

from __future__ import annotations

import asyncio

import pytest

from storage import postgres_instances
from storage.base import Resync, StopRequest
from storage.postgres import PostgresStore
from tests.waiting import eventually

KEY = "slack:T1:C1:1.0"
LIMIT_S = 30.0  # a hang guard only


async def test_a_flood_past_the_queue_is_told_as_a_resync_and_notices_go_on(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_instances, "QUEUE_LIMIT", 3)
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        notices = a.notifications()
        waiting = a._instances._queue
        for run_id in range(1, 5):  # nobody reads: the fourth finds the queue full
            await b.publish_stop(KEY, run_id)
        # Notices arrive in order: overflowed means the fourth came, and nothing is on its way.
        await eventually("the queue overflowed", lambda: a._instances._overflowed)
        assert waiting.qsize() == 3
        for run_id in (1, 2, 3):
            assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(
                KEY, run_id, None, None
            )
        await b.publish_stop(KEY, 6)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == Resync()
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 6, None, None)
        await b.publish_stop(KEY, 7)  # one Resync per overflow, not one per notice after it
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 7, None, None)


async def test_listening_started_again_still_hears_each_notice_once(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        await a._instances.start()  # already listening since it opened: nothing more
        notices = a.notifications()
        await b.publish_stop(KEY, 1)
        await b.publish_stop(KEY, 2)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 1, None, None)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 2, None, None)
        await b.publish_stop(KEY, 3)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 3, None, None)
        assert a._instances._queue.empty()
