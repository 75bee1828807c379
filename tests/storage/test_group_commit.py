"""Concurrent writes share one transaction; each caller still gets its own outcome, after COMMIT.

Some tests hold the store's thread on a gate (a body that waits on a `threading.Event`) so that
the calls made meanwhile are certain to land in one batch.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from core.messages import UserMessage
from storage.sqlite import SqliteStore
from tests.storage.conftest import FakeClock


@pytest.fixture
async def store(db_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    """These tests drive the database thread's internals: that store only."""
    async with SqliteStore.open(db_path, clock=clock) as opened:
        yield opened


@contextmanager
def held(store: SqliteStore) -> Iterator[threading.Event]:
    """Keep the store's thread busy until the block ends (or the event is set)."""
    release = threading.Event()
    entered = threading.Event()

    def gate(db: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    store._read(gate)
    assert entered.wait(10)
    try:
        yield release
    finally:
        release.set()


def trace(store: SqliteStore) -> list[str]:
    """Every statement the store's connection runs from now on."""
    statements: list[str] = []

    def install(db: sqlite3.Connection) -> None:
        db.set_trace_callback(statements.append)

    store._read(install)
    return statements


def raw_connection(db_path: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(db_path, isolation_level=None))


async def test_one_failing_write_in_a_batch_fails_alone_and_the_rest_commit_together(
    store: SqliteStore, db_path: Path
) -> None:
    ids = [
        (await store.get_or_create_conversation(f"terminal:g{n}", channel_key="t")).id
        for n in range(40)
    ]
    statements = trace(store)
    with held(store):
        good = [
            asyncio.ensure_future(store.append_message(i, UserMessage(content=f"to {i}")))
            for i in ids
        ]
        bad = asyncio.ensure_future(store.append_message(999_999, UserMessage(content="nobody")))
        later = [
            asyncio.ensure_future(store.append_message(i, UserMessage(content="again")))
            for i in ids[:5]
        ]
        await asyncio.sleep(0)  # every call is queued behind the gate

    results = await asyncio.gather(*good, bad, *later, return_exceptions=True)

    assert isinstance(results[40], KeyError)
    assert "999999" in str(results[40])
    assert [r.seq for r in results[:40]] == [1] * 40  # type: ignore[union-attr]
    assert [r.seq for r in results[41:]] == [2] * 5  # type: ignore[union-attr]
    # One transaction for all 46 calls, each in its own savepoint; the failed one undone alone.
    assert statements.count("BEGIN IMMEDIATE") == 1
    statements = statements[statements.index("BEGIN IMMEDIATE") :]
    assert statements.count("COMMIT") == 1
    assert statements.count("SAVEPOINT store_call") == 46
    assert statements.count("ROLLBACK TO store_call") == 1
    assert not any(s == "ROLLBACK" for s in statements)

    # Durable: another connection sees every message and nothing of the failed call.
    with raw_connection(db_path) as raw:
        counts = dict(
            raw.execute("SELECT conversation_id, COUNT(*) FROM messages GROUP BY 1").fetchall()
        )
        assert counts == {i: 2 if i in ids[:5] else 1 for i in ids}
        assert (
            raw.execute("SELECT COUNT(*) FROM messages WHERE body LIKE '%nobody%'").fetchone()[0]
            == 0
        )
    for i in ids:
        assert await store.message_count(i) == (2 if i in ids[:5] else 1)


async def test_a_write_returns_only_once_another_connection_can_see_it(
    store: SqliteStore, db_path: Path
) -> None:
    conversation = await store.get_or_create_conversation("terminal:seen", channel_key="t")
    with raw_connection(db_path) as raw:

        async def append_and_look(n: int) -> None:
            stored = await store.append_message(conversation.id, UserMessage(content=f"m{n}"))
            # No await between the return and the look: the commit happened before the return.
            row = raw.execute(
                "SELECT body FROM messages WHERE conversation_id = ? AND seq = ?",
                (conversation.id, stored.seq),
            ).fetchone()
            assert row is not None, f"seq {stored.seq} not visible after its append returned"
            assert f'"m{n}"' in row[0]
            assert await store.claim_delivery(f"d{n}") is True
            claimed = raw.execute("SELECT 1 FROM deliveries WHERE id = ?", (f"d{n}",)).fetchone()
            assert claimed is not None

        await asyncio.gather(*(append_and_look(n) for n in range(300)))


async def test_a_failed_commit_fails_every_write_of_the_batch(
    store: SqliteStore, db_path: Path
) -> None:
    conversation = await store.get_or_create_conversation("terminal:doomed", channel_key="t")

    def poison(db: sqlite3.Connection) -> None:
        # A deferred foreign-key violation passes its savepoint and fails only at COMMIT.
        db.execute("PRAGMA defer_foreign_keys = ON")
        db.execute(
            "INSERT INTO compactions (conversation_id, summary, up_to_seq, created_at) "
            "VALUES (424242, 'orphan', 0, 0)"
        )

    with held(store):
        appends = [
            asyncio.ensure_future(
                store.append_message(conversation.id, UserMessage(content=f"lost {n}"))
            )
            for n in range(10)
        ]
        poisoned = asyncio.ensure_future(store._write(poison))
        await asyncio.sleep(0)
    results = await asyncio.gather(*appends, poisoned, return_exceptions=True)

    assert all(isinstance(r, sqlite3.IntegrityError) for r in results), results
    with raw_connection(db_path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    # Nothing half-done: the next write starts from a clean state.
    assert (await store.append_message(conversation.id, UserMessage(content="ok"))).seq == 1


async def test_reads_and_writes_in_one_batch_see_what_returned_before_them(
    store: SqliteStore,
) -> None:
    conversation = await store.get_or_create_conversation("terminal:rw", channel_key="t")
    await store.append_message(conversation.id, UserMessage(content="first"))
    with held(store):
        count = asyncio.ensure_future(store.message_count(conversation.id))
        append = asyncio.ensure_future(
            store.append_message(conversation.id, UserMessage(content="second"))
        )
        missing = asyncio.ensure_future(store.load(31337))
        loaded = asyncio.ensure_future(store.load(conversation.id))
        await asyncio.sleep(0)
    assert await count in (1, 2)
    assert (await append).seq == 2
    with pytest.raises(KeyError):
        await missing
    assert [s.seq for s in (await loaded).messages] in ([1], [1, 2])
    # Issued after the append returned: must see it.
    assert await store.message_count(conversation.id) == 2


async def test_close_finishes_queued_calls_then_refuses_new_ones(db_path: Path) -> None:
    store = await SqliteStore.open(db_path)
    conversation = await store.get_or_create_conversation("terminal:closing", channel_key="t")
    appends = [
        asyncio.ensure_future(store.append_message(conversation.id, UserMessage(content=str(n))))
        for n in range(100)
    ]
    await asyncio.sleep(0)
    await store.close()
    assert [a.result().seq for a in appends] == list(range(1, 101))
    assert not store._db._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        await store.message_count(conversation.id)
    await store.close()  # closing twice is harmless


async def test_a_forgotten_store_stops_its_thread(db_path: Path) -> None:
    store = await SqliteStore.open(db_path)
    await store.claim_delivery("e1")
    thread = store._db._thread
    del store
    gc.collect()
    await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()
    async with SqliteStore.open(db_path) as again:
        assert await again.claim_delivery("e1") is False
