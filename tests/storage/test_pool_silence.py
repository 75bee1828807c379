"""A pooled connection gone silent (half-open: a NAT or firewall forgot the flow, or the
database host vanished): a statement sent on it fails within a bound as a storage failure,
instead of holding its conversation (and the store's close, which waits for it) for good; the
connection is dropped, and later calls get new ones (issue 24, "Also found", for the pool)."""

from __future__ import annotations

import asyncio

import pytest

from bots.errors import is_storage_failure
from storage import postgres_pool
from storage.postgres import PostgresStore
from tests.storage.proxied import proxy_to, through

KEY = "slack:T1:C1:1700000000.000100"
CHANNEL = "slack:T1:C1"
LIMIT_S = 30.0  # a hang guard, far past the 1 s statement bound set here


async def settled(work: asyncio.Future[object]) -> asyncio.Future[object]:
    done, _ = await asyncio.wait([work], timeout=LIMIT_S)
    assert work in done, "a statement on a silent connection never ended"
    return work


async def test_a_statement_on_a_silent_pooled_connection_fails_and_the_next_gets_a_new_one(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_pool, "STATEMENT_TIMEOUT_S", 1.0)
    async with proxy_to(pg_url) as proxy:
        a = await PostgresStore.open(through(pg_url, proxy.port), min_connections=2)
        try:
            await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
            silenced = proxy.silence_open_connections()  # the pool's two and the listener's
            failures = 0
            while True:  # each silent idle connection fails one call, and is dropped
                call = asyncio.ensure_future(a.get_conversation(KEY))
                if (await settled(call)).exception() is None:
                    break
                failure = call.exception()
                assert isinstance(failure, TimeoutError) and is_storage_failure(failure)
                failures += 1
                assert failures <= silenced, "a silent connection was used again"
            assert failures >= 1
            conversation = call.result()
            assert conversation is not None and conversation.key == KEY
        finally:
            await asyncio.wait_for(a.close(), LIMIT_S)


async def test_a_store_closing_during_a_statement_on_a_silent_connection_still_closes(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing waits for the calls already made: one stuck on a silent connection ends
    within its bound, so the close does too."""
    monkeypatch.setattr(postgres_pool, "STATEMENT_TIMEOUT_S", 1.0)
    async with proxy_to(pg_url) as proxy:
        a = await PostgresStore.open(through(pg_url, proxy.port), min_connections=1)
        await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
        assert proxy.silence_open_connections() >= 1
        stuck = asyncio.ensure_future(a.get_conversation(KEY))
        await asyncio.sleep(0.1)  # sent, and waiting for an answer that never comes
        closing = asyncio.ensure_future(a.close())
        await settled(closing)
        assert closing.exception() is None
        assert isinstance((await settled(stuck)).exception(), TimeoutError)
