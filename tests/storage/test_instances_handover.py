"""A clean shutdown hands its conversations over at once: another instance need not wait out
the lease's time to live (issue 24, "tests that would not notice": the lease DELETE at close)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from storage.postgres import PostgresStore
from tests.waiting import eventually

KEY = "slack:T1:C1:1.0"


async def test_a_cleanly_closed_instance_hands_its_leases_over_at_once(pg_url: str) -> None:
    # A time to live far longer than the test: only a handed-over lease can be taken.
    async with PostgresStore.open(pg_url, lease_ttl_s=3600) as b:
        a = await PostgresStore.open(pg_url, lease_ttl_s=3600)
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        other = await a.get_or_create_conversation(KEY + "2", channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id) and await a.acquire_lease(other.id)
        assert not await b.acquire_lease(conversation.id)
        await a.close()
        assert await b.acquire_lease(conversation.id) and await b.acquire_lease(other.id)
        assert not b.took_over(conversation.id)  # handed over, not taken from an expired holder


async def test_a_closed_instance_renews_nothing_and_listens_no_more(pg_url: str) -> None:
    async with PostgresStore.open(pg_url, lease_ttl_s=3600) as b:
        a = await PostgresStore.open(pg_url, lease_ttl_s=3600)
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id)
        await a.close()
        instances = a._instances
        assert instances._heartbeat is None or instances._heartbeat.done()
        assert instances._listener is None or instances._listener.done()
        assert await b.acquire_lease(conversation.id)
        # A lease asked of a closed store is refused, and starts no heartbeat again.
        with pytest.raises(RuntimeError, match="closed"):
            await a.acquire_lease(conversation.id)
        assert instances._heartbeat is None or instances._heartbeat.done()


async def test_a_lease_let_go_twice_or_never_held_is_let_go_quietly(pg_url: str) -> None:
    # A run fenced out lets its lease lapse, then its driver releases it on the way out (and a
    # heartbeat may have forgotten it already): each is harmless, the new holder keeps it.
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=3600) as a,
        PostgresStore.open(pg_url, lease_ttl_s=3600) as b,
    ):
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        never = await a.get_or_create_conversation(KEY + "2", channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id)
        a.let_lapse(conversation.id)
        a.let_lapse(conversation.id)
        await a.release_lease(conversation.id)
        await a.release_lease(never.id)
        a.let_lapse(never.id)
        assert a.fence(conversation.id) is None
        assert await b.acquire_lease(conversation.id)  # released: taken at once
        await a.release_lease(conversation.id)  # not a's any more: b's lease stands
        assert not await a.acquire_lease(conversation.id)


async def test_a_heartbeat_that_once_found_no_lease_renews_the_next_one(pg_url: str) -> None:
    # An instance between conversations holds no lease for a while; the heartbeat must keep
    # going, or the next conversation's lease expires under its run and another instance
    # takes it over mid-answer.
    ttl = 3.0  # renewed every second
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=ttl) as a,
        PostgresStore.open(pg_url, lease_ttl_s=ttl) as b,
    ):
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id)
        await a.release_lease(conversation.id)
        await asyncio.sleep(ttl)  # beats that find nothing held
        assert await a.acquire_lease(conversation.id)
        fence = a.fence(conversation.id)
        assert fence is not None
        await asyncio.sleep(ttl * 2.5)  # long past its life: only renewals kept it
        assert a.fresh(fence)
        assert not await b.acquire_lease(conversation.id)


async def test_a_renewal_that_failed_is_tried_again_and_the_lease_kept(pg_url: str) -> None:
    # The heartbeat's connection dies (a failover, a restarted pooler): that renewal fails,
    # the next one, on a new connection, must keep the lease.
    ttl = 3.0
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=ttl) as a,
        PostgresStore.open(pg_url, lease_ttl_s=ttl) as b,
    ):
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id)
        fence = a.fence(conversation.id)
        assert fence is not None
        instances = a._instances
        await eventually("the first renewal", lambda: instances._beat_connection is not None)
        beat = instances._beat_connection
        assert beat is not None
        admin = await asyncpg.connect(pg_url)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", beat.get_server_pid())
        finally:
            await admin.close()
        await eventually(
            "a new heartbeat connection", lambda: instances._beat_connection not in (None, beat)
        )
        await asyncio.sleep(ttl * 2)  # long past the life of the last renewal before the kill
        assert a.fresh(fence)
        assert not await b.acquire_lease(conversation.id)
