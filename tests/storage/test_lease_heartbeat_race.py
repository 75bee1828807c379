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

from storage.base import LeaseLost
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


class SteppedRenewals:
    """The heartbeat's renewals one at a time: the first runs `before` and then renews, and
    its answer is held until `release` is set; the next waits at the door (`next_arrived`)
    and never goes in, so the test sees what the first one's answer did, and only that."""

    def __init__(
        self, renew: Callable[[], Awaitable[set[int]]], before: Callable[[], Awaitable[None]]
    ) -> None:
        self._renew = renew
        self._before = before
        self._calls = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.next_arrived = asyncio.Event()

    async def __call__(self) -> set[int]:
        self._calls += 1
        if self._calls > 1:
            self.next_arrived.set()
            await asyncio.Event().wait()  # cancelled when the store closes
        await self._before()
        renewed = await self._renew()
        self.entered.set()
        await self.release.wait()
        return renewed


async def test_a_lease_lost_is_reported_by_the_renewal_that_found_it_even_after_one_taken_during_it(
    pg_url: str,
) -> None:
    """One renewal answers without two leases: one taken while it was on its way (held: not
    reported) and one another instance took (lost: reported by this renewal, not a beat
    later, while the run there goes on writing nothing)."""
    async with PostgresStore.open(pg_url, lease_ttl_s=0.3) as store:
        first, during, lost = [
            await store.get_or_create_conversation(f"{KEY}{n}", channel_key=CHANNEL)
            for n in range(3)
        ]
        assert first.id < during.id < lost.id  # the order the lost ones are looked at in

        async def another_instance_takes_the_lost_one() -> None:
            await store._pool.execute(
                "UPDATE conversation_leases SET holder = 'another instance' "
                "WHERE conversation_id = $1",
                lost.id,
            )

        instances = store._instances
        stepped = SteppedRenewals(instances._renew, another_instance_takes_the_lost_one)
        instances._renew = stepped  # type: ignore[method-assign]
        assert await store.acquire_lease(first.id)  # starts the heartbeat
        assert await store.acquire_lease(lost.id)
        await asyncio.wait_for(stepped.entered.wait(), 30)  # a renewal is on its way
        assert await store.acquire_lease(during.id)  # taken meanwhile
        stepped.release.set()
        await asyncio.wait_for(stepped.next_arrived.wait(), 30)  # that answer was acted on
        reported = []
        while not instances._queue.empty():
            reported.append(instances._queue.get_nowait())
        assert reported == [LeaseLost(lost.id)]
        assert instances._held == {first.id, during.id}
