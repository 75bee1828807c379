"""A busy connection pool does not cost an instance its leases.

Found by the scale-out test (three instances, 100 conversations at once, 1 s leases): one
thread was answered twice. The heartbeat renewed leases through the store's pool, first come,
first served, behind every statement of every running conversation; with the pool busy for
longer than a lease, the renewal came too late, another instance took the conversation over
as if this one had died, and both showed the answer. The heartbeat now has a connection of
its own, as the listener has.
"""

from __future__ import annotations

import asyncio
import contextlib

from storage.postgres import PostgresStore

KEY = "slack:T1:C1:1700000000.000100"
CHANNEL = "slack:T1:C1"
TTL_S = 0.3


async def test_leases_are_renewed_while_every_pooled_connection_is_busy(pg_url: str) -> None:
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=TTL_S, max_connections=2) as store,
        PostgresStore.open(pg_url, lease_ttl_s=TTL_S) as other,
    ):
        conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
        assert await store.acquire_lease(conversation.id)  # starts the heartbeat
        pool = store._pool
        busy = asyncio.Event()
        release = asyncio.Event()
        holding = 0

        async def hold() -> None:  # what 100 conversations' statements do to the pool
            nonlocal holding
            async with pool.acquire():
                holding += 1
                if holding == pool.get_max_size():
                    busy.set()
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(pool.get_max_size())]
        try:
            await asyncio.wait_for(busy.wait(), 30)
            await asyncio.sleep(TTL_S * 5)  # five lease lifetimes with no pooled connection
            # The other instance sees a live holder: the lease was kept up.
            assert not await other.acquire_lease(conversation.id), "the lease expired"
            assert store._instances._queue.empty(), "a LeaseLost was reported"
        finally:
            release.set()
            for task in holders:
                with contextlib.suppress(Exception):
                    await task
