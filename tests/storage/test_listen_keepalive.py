"""A listening connection that went silently dead (half-open: no error, no close, nothing
arrives) is noticed within a bounded time and re-made, so stops and steering from other
instances reach this one again (issue 24, "Also found")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from storage import postgres_instances
from storage.base import Resync, StopRequest
from storage.postgres import PostgresStore
from tests.fakes.tcp_proxy import TcpProxy
from tests.storage.pg import fetch_value
from tests.storage.proxied import proxy_to, through
from tests.waiting import eventually

KEY = "slack:T1:C1:1.0"
LIMIT_S = 30.0  # a hang guard: with checks every 0.3 s the silence is noticed in about 2 s


@asynccontextmanager
async def proxied_pair(
    pg_url: str,
) -> AsyncIterator[tuple[TcpProxy, PostgresStore, PostgresStore]]:
    """Instance A reaching the database through a proxy the test controls; B directly."""
    async with (
        proxy_to(pg_url) as proxy,
        PostgresStore.open(through(pg_url, proxy.port)) as a,
        PostgresStore.open(pg_url) as b,
    ):
        yield proxy, a, b


async def end_listening_sessions(pg_url: str, channel: str) -> int:
    """End every session LISTENing on `channel` (as a failover or an admin would); how many."""
    ended: int = await fetch_value(
        pg_url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE query = $1 AND pid <> pg_backend_pid()",
        f'LISTEN "{channel}"',
    )
    return ended


async def test_a_silently_dead_listening_connection_is_noticed_and_remade(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_instances, "LISTEN_CHECK_S", 0.3)
    monkeypatch.setattr(postgres_instances, "LISTEN_CHECK_TIMEOUT_S", 1.0)
    async with proxied_pair(pg_url) as (proxy, a, b):
        notices = a.notifications()
        await b.publish_stop(KEY, 1)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 1, None, None)
        assert proxy.silence_open_connections() >= 1  # A's listener among them
        # What B sends now goes to a connection nobody hears: A notices the silence, listens
        # again on a new connection and says it may have missed something.
        await b.publish_stop(KEY, 2)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == Resync()
        await b.publish_stop(KEY, 3)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 3, None, None)


async def test_listening_is_retried_until_the_database_answers_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listening connection drops while the database cannot be reached: every attempt to
    listen again fails for a while, and listening resumes once it can be reached."""
    monkeypatch.setattr(postgres_instances, "RECONNECT_DELAY_S", 0.1)
    async with proxied_pair(pg_url) as (proxy, a, b):
        notices = a.notifications()
        proxy.refusing = True
        killed = await end_listening_sessions(pg_url, a._instances.channel)
        assert killed == 2  # A's and B's listeners
        await asyncio.wait_for(proxy.refusals(3), LIMIT_S)  # A keeps trying
        proxy.refusing = False
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == Resync()
        await b.publish_stop(KEY, 4)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 4, None, None)


async def test_a_database_that_takes_the_connection_and_never_answers_is_tried_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listening again after a drop meets a database that accepts the connection and then
    says nothing (hung, or a pooler in front of a dead one): each attempt gives up within the
    check's timeout and another is made, so listening resumes soon after it answers again."""
    monkeypatch.setattr(postgres_instances, "RECONNECT_DELAY_S", 0.1)
    monkeypatch.setattr(postgres_instances, "LISTEN_CHECK_TIMEOUT_S", 1.0)
    async with proxied_pair(pg_url) as (proxy, a, b):
        notices = a.notifications()
        proxy.black_holing = True
        await end_listening_sessions(pg_url, a._instances.channel)
        # Attempts a second or so apart; one without a bound would hang for a minute.
        await eventually("three attempts that got no answer", lambda: proxy.black_holed >= 3, 20.0)
        proxy.black_holing = False
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == Resync()
        await b.publish_stop(KEY, 5)
        assert await asyncio.wait_for(anext(notices), LIMIT_S) == StopRequest(KEY, 5, None, None)


async def test_the_listening_session_asks_the_server_for_tcp_keepalives(pg_url: str) -> None:
    # Over TCP the server then ends a dead client's session by itself (30 + 3 × 10 s).
    async with PostgresStore.open(pg_url) as a:
        listening = a._instances.listening
        assert listening is not None
        settings = {
            name: await listening.fetchval(f"SHOW {name}") for name in postgres_instances.KEEPALIVES
        }
        assert settings == postgres_instances.KEEPALIVES


async def test_a_store_whose_connections_went_silent_still_closes(pg_url: str) -> None:
    """A shutdown while the network between Teammate and its database is black-holed (every
    connection open is silent): closing gives up on the goodbyes within a bound, so the
    process can exit and another instance take over (the lease handed over at close is
    left to expire then)."""
    async with proxy_to(pg_url) as proxy:
        a = await PostgresStore.open(through(pg_url, proxy.port))
        conversation = await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        assert await a.acquire_lease(conversation.id)
        assert proxy.silence_open_connections() >= 2
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(a.close(), 60)
        # About 5 s (the goodbyes' timeout, all at once); unbounded, it never ends.
        assert loop.time() - started < 25


async def test_a_close_its_caller_gave_up_on_ends_when_told(pg_url: str) -> None:
    """An orchestrator's grace is a timeout around closing: when it runs out while the
    goodbyes wait on a silent network, closing must end then, not swallow the cancellation
    and return seconds later as if it had been given all the time it took."""
    async with proxy_to(pg_url) as proxy:
        a = await PostgresStore.open(through(pg_url, proxy.port))
        await a.get_or_create_conversation(KEY, channel_key="slack:T1:C1")
        assert proxy.silence_open_connections() >= 2
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(a.close(), 0.5)
        # The listener's goodbye alone waits 2 s; the pool's another 5.
        assert loop.time() - started < 1.8
        # The test's own tidying, which the process exiting would do: whatever is left.
        await asyncio.wait_for(a._instances.close(), 30)
        await asyncio.wait_for(a._pool.close(), 30)
