"""The SQLite store's batching: a call alone is one autocommit statement; calls made
meanwhile run as one transaction of a fixed number of statements; savepoints appear only when
a failed batch is retried, to undo the failing call alone.

Calls are made as tasks created together: the first runs alone at once, the others queue
behind it and are certain to form one batch.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import pytest

from core.messages import UserMessage
from storage.batching import Batcher, Op
from storage.sqlite import SqliteStore
from storage.sqlite_ops import SqliteTransactions

T = TypeVar("T")


@pytest.fixture
def store(sqlite_store: SqliteStore) -> SqliteStore:
    """These tests read the SQLite store's own connections: SQLite only, whatever backends the
    contract suite runs on."""
    return sqlite_store


async def traced(db: aiosqlite.Connection) -> list[str]:
    """Every statement `db` runs from now on (with its values). SQLite traces a statement
    again for each statement its triggers run: those repeats are left out."""
    statements: list[str] = []

    def keep(statement: str) -> None:
        if not statement.startswith("--") and statements[-1:] != [statement]:
            statements.append(statement)

    await db.set_trace_callback(keep)
    return statements


async def together(*calls: Callable[[], Awaitable[T]]) -> list[T | BaseException]:
    tasks = [asyncio.ensure_future(call()) for call in calls]
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_lone_write_is_one_autocommit_statement(store: SqliteStore) -> None:
    conversation = await store.get_or_create_conversation("k", channel_key="c")
    accepted = await store.accept_delivery(
        "k", UserMessage(content="hi"), channel_key="c", delivery_id="d1"
    )
    assert accepted is not None
    statements = await traced(store._writer)

    stored = await store.append_message(conversation.id, UserMessage(content="one"))
    claimed = await store.claim_delivery("d2")
    delivered = await store.deliver(conversation.id, [accepted.item.id])

    assert (stored.seq, claimed, [s.seq for s in delivered]) == (1, True, [2])
    assert len(statements) == 3, statements
    assert not any(s.split()[0] in ("BEGIN", "SAVEPOINT", "COMMIT") for s in statements)
    assert await store.message_count(conversation.id) == 2


async def test_a_lone_run_start_delivering_one_message_is_one_autocommit_statement(
    store: SqliteStore,
) -> None:
    # What the runner does for every answer: start the run and deliver the message it answers.
    accepted = await store.accept_delivery(
        "k", UserMessage(content="hi"), channel_key="c", delivery_id="d1"
    )
    assert accepted is not None
    conversation_id = accepted.conversation.id
    statements = await traced(store._writer)

    run = await store.start_run(
        conversation_id,
        user_id="U1",
        model="m",
        surface_ref={"ts": "1"},
        deliver=[accepted.item.id],
    )

    assert len(statements) == 1, statements
    assert (run.outcome, run.user_id, run.model, run.channel_key) == ("running", "U1", "m", "c")
    assert (run.conversation_key, run.surface_ref) == ("k", {"ts": "1"})
    assert [s.message.text() for s in (await store.load(conversation_id)).messages] == ["hi"]
    assert await store.pending(conversation_id) == []
    assert [r.id for r in await store.running_runs()] == [run.id]
    # Delivered before: the run starts, nothing is delivered twice.
    again = await store.start_run(conversation_id, deliver=[accepted.item.id])
    assert again.id != run.id and await store.message_count(conversation_id) == 1
    # Another conversation's item (or none): no run, a KeyError, as with several items.
    other = await store.get_or_create_conversation("k2", channel_key="c")
    with pytest.raises(KeyError):
        await store.start_run(other.id, deliver=[accepted.item.id])
    with pytest.raises(KeyError):
        await store.start_run(other.id + 100, deliver=[accepted.item.id])
    assert len(await store.running_runs()) == 2


@pytest.mark.parametrize("size", [20, 200])
async def test_a_batch_is_a_fixed_number_of_statements_whatever_its_size(
    store: SqliteStore, size: int
) -> None:
    ids = [
        (await store.get_or_create_conversation(f"k{n}", channel_key="c")).id for n in range(size)
    ]
    statements = await traced(store._writer)

    results = await together(
        *(lambda i=i: store.append_message(i, UserMessage(content=f"to {i}")) for i in ids),
        *(lambda n=n: store.claim_delivery(f"ev{n}") for n in range(size)),
    )

    assert all(not isinstance(r, BaseException) for r in results), results
    # The first call ran alone; every other call, appends and claims, in ONE transaction.
    assert statements.count("BEGIN IMMEDIATE") == 1
    assert statements.count("COMMIT") == 1
    batch = statements[statements.index("BEGIN IMMEDIATE") : statements.index("COMMIT") + 1]
    assert not any(s.startswith("SAVEPOINT") for s in statements)
    # `executemany` runs its statement once per row (traced with its values): count kinds.
    assert len({s[:50] for s in batch}) <= 6, sorted({s[:50] for s in batch})
    for i in ids:
        assert await store.message_count(i) == 1


async def test_an_unknown_id_in_a_batch_fails_its_call_alone_without_a_retry(
    store: SqliteStore,
) -> None:
    ids = [(await store.get_or_create_conversation(f"k{n}", channel_key="c")).id for n in range(5)]
    statements = await traced(store._writer)

    results = await together(
        *(lambda i=i: store.append_message(i, UserMessage(content="x")) for i in ids),
        lambda: store.append_message(999_999, UserMessage(content="nobody")),
        lambda: store.append_message(ids[0], UserMessage(content="again")),
    )

    assert isinstance(results[5], KeyError) and "999999" in str(results[5])
    assert [r.seq for r in results[:5]] == [1] * 5  # type: ignore[union-attr]
    assert results[6].seq == 2  # type: ignore[union-attr]
    assert "ROLLBACK" not in statements and not any("SAVEPOINT" in s for s in statements)


@pytest.fixture
async def raw_db(db_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    async with aiosqlite.connect(db_path, isolation_level=None) as db:
        await db.execute("CREATE TABLE t (x INTEGER NOT NULL CHECK (x >= 0))")
        yield db


async def _insert_one(db: aiosqlite.Connection, x: int) -> int:
    await db.execute("INSERT INTO t (x) VALUES (?)", (x,))
    return x


async def _insert_many(db: aiosqlite.Connection, xs: list[int]) -> list[int]:
    await db.executemany("INSERT INTO t (x) VALUES (?)", [(x,) for x in xs])
    return xs


INSERT: Op[aiosqlite.Connection, int, int] = Op(
    "insert", one=_insert_one, lone=_insert_one, many=_insert_many
)


async def test_a_failing_statement_is_isolated_by_savepoints_when_its_batch_is_retried(
    raw_db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(raw_db, SqliteTransactions())
    statements = await traced(raw_db)

    results = await together(*(lambda x=x: batcher.submit(INSERT, x) for x in [0, 1, 2, -3, 4, 5]))

    assert isinstance(results[3], sqlite3.IntegrityError)
    assert [r for r in results if not isinstance(r, BaseException)] == [0, 1, 2, 4, 5]
    # The batch (all but the first call) failed whole, was rolled back, and ran again with a
    # savepoint per call: only the failing one was undone.
    assert statements.count("BEGIN IMMEDIATE") == 2
    assert statements.count("ROLLBACK") == 1
    assert statements.count("SAVEPOINT store_call") == 5
    assert statements.count("ROLLBACK TO store_call") == 1
    with closing(sqlite3.connect(db_path)) as other:
        assert sorted(x for (x,) in other.execute("SELECT x FROM t")) == [0, 1, 2, 4, 5]


async def test_a_failed_commit_fails_every_call_of_the_batch(
    store: SqliteStore, db_path: Path
) -> None:
    conversation = await store.get_or_create_conversation("k", channel_key="c")

    async def poison(db: aiosqlite.Connection, _arg: None) -> None:
        # A deferred foreign-key violation passes its statement and fails only at COMMIT.
        await db.execute("PRAGMA defer_foreign_keys = ON")
        await db.execute(
            "INSERT INTO compactions (conversation_id, summary, up_to_seq, created_at) "
            "VALUES (424242, 'orphan', 0, 0)"
        )

    def append(n: int) -> Callable[[], Awaitable[Any]]:
        return lambda: store.append_message(conversation.id, UserMessage(content=f"lost {n}"))

    results = await together(
        append(0), *(append(n) for n in range(1, 10)), lambda: store._write(Op("p", poison), None)
    )

    assert not isinstance(results[0], BaseException)  # alone, before the batch
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results[1:]), results
    with closing(sqlite3.connect(db_path)) as other:
        assert other.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1
    # Nothing half-done: the next write starts from a clean state.
    assert (await store.append_message(conversation.id, UserMessage(content="ok"))).seq == 2


async def test_writes_return_only_once_another_connection_can_see_them(
    store: SqliteStore, db_path: Path
) -> None:
    conversation = await store.get_or_create_conversation("k", channel_key="c")
    with closing(sqlite3.connect(db_path, isolation_level=None)) as raw:

        async def append_and_look(n: int) -> None:
            stored = await store.append_message(conversation.id, UserMessage(content=f"m{n}"))
            row = raw.execute(
                "SELECT body FROM messages WHERE conversation_id = ? AND seq = ?",
                (conversation.id, stored.seq),
            ).fetchone()
            assert row is not None and f'"m{n}"' in row[0]
            assert await store.claim_delivery(f"d{n}") is True
            assert raw.execute("SELECT 1 FROM deliveries WHERE id = ?", (f"d{n}",)).fetchone()

        await asyncio.gather(*(append_and_look(n) for n in range(200)))


async def test_close_finishes_queued_calls_then_refuses_new_ones(db_path: Path) -> None:
    store = await SqliteStore.open(db_path)
    conversation = await store.get_or_create_conversation("k", channel_key="c")
    appends = [
        asyncio.ensure_future(store.append_message(conversation.id, UserMessage(content=str(n))))
        for n in range(100)
    ]
    await asyncio.sleep(0)
    await store.close()
    assert sorted(a.result().seq for a in appends) == list(range(1, 101))
    with pytest.raises(RuntimeError, match="closed"):
        await store.message_count(conversation.id)
    await store.close()  # closing twice is harmless


def driver_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def test_a_forgotten_store_stops_its_threads(db_path: Path) -> None:
    # Counted by identity, not by number: threads of earlier tests' stores may still be
    # winding down (or end) while this test runs, on a loaded machine especially.
    before = driver_threads()
    store = await SqliteStore.open(db_path)
    await store.claim_delivery("e1")
    ours = driver_threads() - before
    assert len(ours) == 2  # the writer's and the reader's
    del store
    gc.collect()
    for _ in range(200):
        if not any(thread.is_alive() for thread in ours):
            break
        await asyncio.sleep(0.05)
    assert not [thread.name for thread in ours if thread.is_alive()]
    async with SqliteStore.open(db_path) as again:
        assert await again.claim_delivery("e1") is False


async def test_the_stores_triggers_never_reach_the_file(store: SqliteStore, db_path: Path) -> None:
    await store.get_or_create_conversation("k", channel_key="c")
    with closing(sqlite3.connect(db_path)) as other:
        schema = other.execute("SELECT type, name FROM sqlite_master").fetchall()
    # The schema's own triggers (the audit log refusing UPDATE/DELETE) are in the file by
    # design; the store's connection-scoped ones never are.
    persisted = {name for kind, name in schema if kind in ("trigger", "view")}
    assert persisted == {"audit_log_no_update", "audit_log_no_delete"}
    assert not [name for _kind, name in schema if name.startswith("teammate_")]
