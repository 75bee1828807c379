"""The lease heartbeat over a network gone silent (a NAT or firewall that forgot the flow, a
database that hangs): every renewal and every reconnect gives up within a lease's lifetime, so
once the database answers again the instance learns at once which leases it lost; and an
instance keeps nothing of the conversations it let go (issue 24, postgres_instances' mutants)."""

from __future__ import annotations

import asyncio

from storage.base import LeaseLost, Notification
from storage.postgres import PostgresStore
from tests.storage.pg import fetch_value
from tests.storage.proxied import proxy_to, through
from tests.waiting import eventually

KEY = "slack:T1:C1:1700000000.000100"
CHANNEL = "slack:T1:C1"
TTL_S = 1.0
LIMIT_S = 30.0  # a hang guard


async def lease_lost(notices: asyncio.Queue[Notification]) -> LeaseLost:
    while not isinstance(notice := await notices.get(), LeaseLost):
        pass  # a Resync from the listener, which lost its connection too
    return notice


async def lease_expiry(pg_url: str, conversation_id: int) -> float:
    expiry = await fetch_value(
        pg_url,
        "SELECT extract(epoch FROM expires_at) FROM conversation_leases WHERE conversation_id = $1",
        conversation_id,
    )
    return float(expiry)


async def renewed_past(pg_url: str, conversation_id: int, expiry: float) -> bool:
    return await lease_expiry(pg_url, conversation_id) > expiry


async def test_a_heartbeat_cut_off_by_silence_says_which_lease_it_lost_once_heard_again(
    pg_url: str,
) -> None:
    async with proxy_to(pg_url) as proxy, PostgresStore.open(pg_url, lease_ttl_s=TTL_S) as b:
        a = await PostgresStore.open(through(pg_url, proxy.port), lease_ttl_s=TTL_S)
        try:
            conversation = await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
            assert await a.acquire_lease(conversation.id)
            notices: asyncio.Queue[Notification] = asyncio.Queue()

            async def hear() -> None:
                async for notice in a.notifications():
                    notices.put_nowait(notice)

            hearing = asyncio.create_task(hear())
            # The heartbeat's connection is made at its first renewal: wait for one.
            first = await lease_expiry(pg_url, conversation.id)
            await eventually(
                "a renewal", lambda: renewed_past(pg_url, conversation.id, first), LIMIT_S
            )
            # A's renewals now go nowhere, and so would any connection it opens.
            proxy.black_holing = True
            assert proxy.silence_open_connections() >= 2  # the heartbeat's and the listener's
            # Its lease lapses and B takes it; A's heartbeat, having given up on the silent
            # renewal, tries a new connection, which the database takes and never answers.
            await eventually(
                "B taking the lapsed lease", lambda: b.acquire_lease(conversation.id), LIMIT_S
            )
            # The first connection taken into the black hole is asyncpg's, cancelling the
            # renewal that timed out; the second is the heartbeat's own.
            await eventually("A's heartbeat connecting again", lambda: proxy.black_holed >= 2)
            proxy.black_holing = False
            # That attempt gives up too; the next one is heard and finds the lease gone.
            assert await asyncio.wait_for(lease_lost(notices), LIMIT_S) == LeaseLost(
                conversation.id
            )
            hearing.cancel()
        finally:
            await asyncio.wait_for(a.close(), LIMIT_S)  # its pooled connections are silent


async def test_an_instance_keeps_nothing_of_the_conversations_it_let_go(pg_url: str) -> None:
    """A long-lived instance holds a lease for each conversation it ever ran: what it keeps
    per lease must go with the lease, or it grows with every conversation for good."""
    async with PostgresStore.open(pg_url, lease_ttl_s=3600) as a:
        ids = [
            (await a.get_or_create_conversation(f"{KEY}{n}", channel_key=CHANNEL)).id
            for n in range(20)
        ]
        for cid in ids:
            assert await a.acquire_lease(cid)
        for cid in ids[:10]:
            await a.release_lease(cid)
        for cid in ids[10:]:
            a.let_lapse(cid)
        instances = a._instances
        kept = {
            "held": instances._held,
            "taken": instances._taken,
            "taken over": instances._taken_over,
            "epochs": instances._epochs,
            "renewed": instances._renewed,
        }
        assert {name: len(of) for name, of in kept.items() if of} == {}


async def test_a_closed_instance_leaves_no_connection_open(pg_url: str) -> None:
    """Its heartbeat's connection included: one left open is a session the database keeps
    (and counts against its connection limit) for as long as the process lives."""
    async with proxy_to(pg_url) as proxy:
        a = await PostgresStore.open(through(pg_url, proxy.port), lease_ttl_s=TTL_S)
        conversation = await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
        assert await a.acquire_lease(conversation.id)
        first = await lease_expiry(pg_url, conversation.id)
        await eventually("a renewal", lambda: renewed_past(pg_url, conversation.id, first))
        assert proxy.carrying() >= 4  # the pool's two, the listener's, the heartbeat's
        await a.close()
        await eventually("every connection closed", lambda: proxy.carrying() == 0)
