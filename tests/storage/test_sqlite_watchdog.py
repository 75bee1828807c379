"""Issue 24, R2: the SQLite driver's worker thread dies. Every call on that connection fails
with a storage error within a bounded time (none hangs, `close()` neither), the store says
once that it is unhealthy, and what was committed before is still in the file."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from core.messages import UserMessage
from storage.sqlite import SqliteStore

# The bound on every wait below: the watchdog looks once a second.
BOUND_S = 5.0
UNHEALTHY = "the SQLite store is unhealthy: its worker thread stopped; restart Teammate"


def kill_worker(db: object) -> None:
    """End an aiosqlite connection's worker thread as a crash would: a malformed item fails
    to unpack outside its try and ends the thread (aiosqlite 0.21-0.22)."""
    db._tx.put(("x",))  # type: ignore[attr-defined]
    db._thread.join(BOUND_S)  # type: ignore[attr-defined]
    assert not db._thread.is_alive()  # type: ignore[attr-defined]


async def close_within_bound(store: SqliteStore) -> None:
    """Close the store, failing (not hanging) if that takes longer than the bound; either way
    no driver thread is left running to hold up the end of the test run."""
    closing = asyncio.ensure_future(store.close())
    done, _ = await asyncio.wait({closing}, timeout=BOUND_S)
    if not done:
        for db in (store._writer, store._reader):
            if db is not None:
                db.stop()
        for _ in range(3):  # aiosqlite's close() awaits again in its `finally`
            closing.cancel()
            await asyncio.wait({closing}, timeout=0.1)
        pytest.fail("close() hung")
    closing.result()


async def accept(store: SqliteStore, n: int) -> object:
    return await store.accept_delivery(
        "conv", UserMessage(content=f"m{n}"), channel_key="chan", delivery_id=f"d{n}"
    )


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_dead_writer_thread_fails_calls_and_keeps_what_was_committed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.db"
    store = await SqliteStore.open(path)
    try:
        accepted = await accept(store, 1)
        assert accepted is not None
        conversation_id = accepted.conversation.id

        caplog.set_level(logging.ERROR)
        kill_worker(store._writer)
        # One in flight when the thread died (it waits on the dead thread's queue) ...
        in_flight = asyncio.ensure_future(accept(store, 2))
        with pytest.raises(sqlite3.OperationalError, match="worker stopped"):
            await asyncio.wait_for(in_flight, BOUND_S)
        # ... and one made after: it fails at once.
        with pytest.raises(sqlite3.OperationalError, match="worker stopped"):
            await asyncio.wait_for(accept(store, 3), 0.5)
        # Reads on the reader still work: what was committed is there.
        assert [i.message.text() for i in await store.pending(conversation_id)] == ["m1"]
    finally:
        await close_within_bound(store)
    assert [r.getMessage() for r in caplog.records].count(UNHEALTHY) == 1

    async with SqliteStore.open(path) as again:
        assert [i.message.text() for i in await again.pending(conversation_id)] == ["m1"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_dead_reader_thread_fails_a_pending_read(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "r.db")
    try:
        accepted = await accept(store, 1)
        assert accepted is not None
        kill_worker(store._reader)
        with pytest.raises(sqlite3.OperationalError, match="worker stopped"):
            await asyncio.wait_for(store.pending(accepted.conversation.id), BOUND_S)
        # Writes go on through the writer, which is alive.
        assert await accept(store, 2) is not None
    finally:
        await close_within_bound(store)
