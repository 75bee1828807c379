"""Group commit (`storage.batching`), pinned where the main tests left room (issue 15's
mutation runs): how many calls one batch takes, a call with no single-statement form, a
batch whose transaction cannot start, a caller that stops waiting, `drain`.

Real SQLite connections throughout; calls are made as tasks created together (the first
runs alone at once, the others queue behind it and form one batch).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import TypeVar

import aiosqlite
import pytest

from storage.batching import MAX_BATCH, Batcher, Op
from storage.sqlite_ops import SqliteTransactions
from tests.storage.test_batching import traced

T = TypeVar("T")


async def together(*calls: Callable[[], Awaitable[T]]) -> list[T | BaseException]:
    tasks = [asyncio.ensure_future(call()) for call in calls]
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def db(db_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    async with aiosqlite.connect(db_path, isolation_level=None, timeout=0) as db:
        await db.execute("CREATE TABLE t (x INTEGER NOT NULL CHECK (x >= 0))")
        yield db


def stored(db_path: Path) -> list[int]:
    with closing(sqlite3.connect(db_path)) as other:
        return sorted(x for (x,) in other.execute("SELECT x FROM t"))


async def insert_one(db: aiosqlite.Connection, x: int) -> int:
    await db.execute("INSERT INTO t (x) VALUES (?)", (x,))
    return x


async def insert_many(db: aiosqlite.Connection, xs: list[int]) -> list[int]:
    await db.executemany("INSERT INTO t (x) VALUES (?)", [(x,) for x in xs])
    return xs


INSERT: Op[aiosqlite.Connection, int, int] = Op(
    "insert", one=insert_one, lone=insert_one, many=insert_many
)


async def insert_then_check(db: aiosqlite.Connection, x: int) -> int:
    """Two statements: the insert stands only if the whole call does."""
    await db.execute("INSERT INTO t (x) VALUES (?)", (abs(x),))
    if x < 0:
        raise ValueError(f"{x} refused after its insert")
    return x


TWO_STEP: Op[aiosqlite.Connection, int, int] = Op("two-step", one=insert_then_check)


async def test_calls_queued_beyond_max_batch_wait_for_the_next_batch(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())
    statements = await traced(db)
    count = 1 + MAX_BATCH + 1  # one alone, then one call more than a batch takes

    results = await together(*(lambda x=x: batcher.submit(INSERT, x) for x in range(count)))

    assert results == list(range(count))
    # one full batch; the call left over runs after its COMMIT, alone (autocommit)
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    begin, commit = statements.index("BEGIN IMMEDIATE"), statements.index("COMMIT")
    assert sum(s.startswith("INSERT") for s in statements[begin:commit]) == MAX_BATCH
    assert statements[commit + 1 :] == [f"INSERT INTO t (x) VALUES ({count - 1})"]
    assert stored(db_path) == list(range(count))


async def test_a_call_without_a_lone_form_runs_whole_in_its_own_transaction(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())
    statements = await traced(db)

    assert await batcher.submit(TWO_STEP, 1) == 1
    with pytest.raises(ValueError, match="refused"):
        await batcher.submit(TWO_STEP, -2)

    # its insert was undone with it; the batcher is free for the next call
    assert stored(db_path) == [1]
    assert statements.count("BEGIN IMMEDIATE") == 2 and statements.count("ROLLBACK") == 1
    assert await batcher.submit(INSERT, 3) == 3
    assert stored(db_path) == [1, 3]


async def test_a_lone_call_without_a_lone_form_queued_behind_another_runs_alone(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())

    results = await together(
        lambda: batcher.submit(INSERT, 1), lambda: batcher.submit(TWO_STEP, -5)
    )

    assert results[0] == 1 and isinstance(results[1], ValueError)
    assert stored(db_path) == [1]


async def test_when_the_transaction_cannot_start_every_call_of_the_batch_gets_the_error(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())
    with closing(sqlite3.connect(db_path, isolation_level=None, timeout=0)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        results = await together(*(lambda x=x: batcher.submit(INSERT, x) for x in range(4)))
        other.execute("ROLLBACK")

    assert all(isinstance(r, sqlite3.OperationalError) for r in results), results
    assert stored(db_path) == []
    assert await batcher.submit(INSERT, 7) == 7  # and the batcher goes on afterwards


async def test_a_caller_that_stops_waiting_does_not_stop_its_call_or_the_others(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())
    tasks = [asyncio.ensure_future(batcher.submit(INSERT, x)) for x in range(5)]
    await asyncio.sleep(0)
    tasks[2].cancel()  # queued: its call runs in the batch all the same

    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert isinstance(results[2], asyncio.CancelledError)
    assert [r for i, r in enumerate(results) if i != 2] == [0, 1, 3, 4]
    await batcher.drain()
    assert stored(db_path) == [0, 1, 2, 3, 4]


async def test_drain_returns_once_every_call_made_so_far_has_run(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, SqliteTransactions())
    await batcher.drain()  # nothing to wait for
    alone = asyncio.ensure_future(batcher.submit(INSERT, 9))
    await asyncio.sleep(0)  # on the connection, nothing queued behind it
    await batcher.drain()
    assert alone.done() and alone.result() == 9
    tasks = [asyncio.ensure_future(batcher.submit(INSERT, x)) for x in range(6)]
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()  # nobody waits for the answers any more

    await batcher.drain()

    assert stored(db_path) == [0, 1, 2, 3, 4, 5, 9]
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_calls_without_a_lone_form_made_together_share_one_transaction(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    # nothing runs when they are made: they still form one unit of work on the connection,
    # which `drain` waits for, and no call slips in beside it
    batcher = Batcher(db, SqliteTransactions())
    statements = await traced(db)
    tasks = [asyncio.ensure_future(batcher.submit(TWO_STEP, x)) for x in (1, 2, 3)]
    await asyncio.sleep(0)

    await batcher.drain()

    assert all(task.done() for task in tasks)
    assert [task.result() for task in tasks] == [1, 2, 3]
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    assert stored(db_path) == [1, 2, 3]


class RollbackReportsAnError(SqliteTransactions):
    """Rolls back, then fails as a driver may (a connection lost as it answered)."""

    async def rollback(self, db: aiosqlite.Connection) -> None:
        await super().rollback(db)
        raise ConnectionError("the rollback's answer was lost")


async def test_a_failing_rollback_never_hides_the_calls_own_outcome(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    batcher = Batcher(db, RollbackReportsAnError())
    # alone, without a lone form: its own transaction, rolled back
    with pytest.raises(ValueError, match="refused"):
        await batcher.submit(TWO_STEP, -2)
    # a batch that fails whole: rolled back, then retried call by call
    results = await together(*(lambda x=x: batcher.submit(INSERT, x) for x in [0, 1, -3, 4]))
    assert results[:2] == [0, 1] and results[3] == 4
    assert isinstance(results[2], sqlite3.IntegrityError)
    assert stored(db_path) == [0, 1, 4]


async def orphan(db: aiosqlite.Connection, _arg: int) -> int:
    # A deferred foreign-key violation passes its statement and fails only at COMMIT.
    await db.execute("PRAGMA defer_foreign_keys = ON")
    await db.execute("INSERT INTO child (parent_id) VALUES (424242)")
    return 0


ORPHAN: Op[aiosqlite.Connection, int, int] = Op("orphan", one=orphan)


async def test_a_retried_batch_whose_commit_fails_fails_every_call_despite_the_rollback(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    await db.execute("CREATE TABLE child (parent_id INTEGER REFERENCES parent (id))")
    batcher = Batcher(db, RollbackReportsAnError())

    results = await together(
        lambda: batcher.submit(INSERT, 0),
        lambda: batcher.submit(INSERT, 1),
        lambda: batcher.submit(ORPHAN, 0),
    )

    assert results[0] == 0  # alone, before the batch
    assert all(isinstance(r, sqlite3.IntegrityError) for r in results[1:]), results
    assert stored(db_path) == [0]


async def test_when_the_retry_cannot_start_every_call_of_the_batch_gets_the_error(
    db: aiosqlite.Connection, db_path: Path
) -> None:
    with closing(sqlite3.connect(db_path, isolation_level=None, timeout=0)) as other:

        class AnotherWriterGetsIn(SqliteTransactions):
            """Between the failed batch and its retry, another process takes the lock."""

            async def rollback(self, db: aiosqlite.Connection) -> None:
                await super().rollback(db)
                other.execute("BEGIN IMMEDIATE")

        batcher = Batcher(db, AnotherWriterGetsIn())
        results = await together(*(lambda x=x: batcher.submit(INSERT, x) for x in [0, 1, -2, 3]))
        other.execute("ROLLBACK")

    assert results[0] == 0  # alone, before the batch
    assert all(isinstance(r, sqlite3.OperationalError) for r in results[1:]), results
    assert stored(db_path) == [0]
