"""A listening connection that went silently dead (half-open: no error, no close, nothing
arrives) is noticed within a bounded time and re-made, so stops and steering from other
instances reach this one again (issue 24, "Also found")."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import pytest

from storage import postgres_instances
from storage.base import Resync, StopRequest
from storage.postgres import PostgresStore
from tests.fakes.tcp_proxy import proxying

KEY = "slack:T1:C1:1.0"
LIMIT_S = 30.0  # a hang guard: with checks every 0.3 s the silence is noticed in about 2 s


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{port}"))


async def test_a_silently_dead_listening_connection_is_noticed_and_remade(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_instances, "LISTEN_CHECK_S", 0.3)
    monkeypatch.setattr(postgres_instances, "LISTEN_CHECK_TIMEOUT_S", 1.0)
    server = urlsplit(pg_url)
    assert server.hostname is not None and server.port is not None
    async with (
        proxying(server.hostname, server.port) as proxy,
        PostgresStore.open(through(pg_url, proxy.port)) as a,
        PostgresStore.open(pg_url) as b,
    ):
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
