"""A lease taken while the heartbeat's renewal is in flight is not reported lost.

Found by the crash runs (benchmarks/chaos.py on three PostgreSQL instances): live instances
logged "lost the lease of conversation N" and cancelled the run they had just started. The
heartbeat renews every lease this instance holds in one UPDATE, then reports as lost each
held lease the UPDATE did not return; a lease acquired after the UPDATE's snapshot but before
its answer was counted as held and not renewed, so it was reported lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from storage.postgres import PostgresStore

KEY = "slack:T1:C1:1700000000.000100"
CHANNEL = "slack:T1:C1"


class GatedRenewal:
    """The heartbeat's renewal, carried out, then its answer held until `release` is set."""

    def __init__(self, renew: Callable[[], Awaitable[set[int]]]) -> None:
        self._renew = renew
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> set[int]:
        renewed = await self._renew()
        self.entered.set()  # done: its answer is on its way
        await self.release.wait()
        return renewed


async def test_a_lease_taken_during_a_renewal_is_not_reported_lost(pg_url: str) -> None:
    async with PostgresStore.open(pg_url, lease_ttl_s=0.3) as store:
        first = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
        second = await store.get_or_create_conversation(KEY + "1", channel_key=CHANNEL)
        instances = store._instances
        gated = GatedRenewal(instances._renew)
        instances._renew = gated  # type: ignore[method-assign]
        assert await store.acquire_lease(first.id)  # starts the heartbeat
        await asyncio.wait_for(gated.entered.wait(), 30)  # a renewal is on its way
        assert await store.acquire_lease(second.id)  # taken meanwhile
        gated.entered.clear()
        gated.release.set()
        await asyncio.wait_for(gated.entered.wait(), 30)  # that renewal was answered
        await asyncio.sleep(0)
        assert second.id in instances._held, "reported lost although it is held"
        assert instances._queue.empty(), "a LeaseLost was sent for a lease it holds"
