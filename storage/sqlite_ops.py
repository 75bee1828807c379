"""What every SQLite store call is built on: the connection type, fetching, round trips,
transactions, and the generic read.

Owns: `Db` (an aiosqlite connection), `fetchall`/`fetchone`, `together` (statements that do
not need each other's results handed to the driver at once: one round trip), `json_list` (one
`json_each(?)` parameter, whatever the count), `one_of` (a set-oriented operation applied to
one call), the batcher's transaction statements (`SqliteTransactions`, and `NoTransactions`
for the reader), `READ` (unrelated reads run together), and the converter that parses a
message column on the driver's thread as rows are fetched.

The SQL of each call lives with its owner, each call a `storage.batching.Op` (its statements
alone, and for many calls at once): `sqlite_conversations` (conversations, messages,
compactions), `sqlite_inbox` (deliveries and the inbox), `sqlite_runs`, `sqlite_usage` (the
ledger and feedback), `sqlite_channel_config`, `sqlite_memory`, `sqlite_schedules`; the writer
connection's TEMP objects are `sqlite_triggers`. `storage/sqlite.py` owns the store, its
connections and opening a file; `storage.rows` turns rows into records (for both backends).

How a call stays one statement (docs/architecture.md, "Storage"): a batch's statements do not
grow with its calls (`json_each` lookups, `executemany`, `RETURNING`), and those that do not
need each other's results are handed to the driver together (`together`): one round trip.

Must not: open connections or transactions of its own; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import aiosqlite

from core.messages import load_message
from storage.batching import Op

T = TypeVar("T")
Db = aiosqlite.Connection

# A column named `"x [teammate_message]"` is parsed into a `Message` as it is fetched.
sqlite3.register_converter("teammate_message", load_message)


def json_list(values: Iterable[Any]) -> str:
    """A JSON array for `json_each(?)`: one parameter, whatever the count."""
    return json.dumps(list(values), separators=(",", ":"))


async def fetchall(db: Db, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """One statement, its rows: one round trip."""
    return list(await db.execute_fetchall(sql, params))


async def together(*steps: Awaitable[Any]) -> list[Any]:
    """Hand the driver every statement at once, in order: one round trip for all of them
    (each is queued when its task first runs, and tasks first run in the order made). The
    first exception is raised once every statement has finished."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def fetchone(db: Db, sql: str, params: Sequence[Any] = ()) -> Any:
    found = await fetchall(db, sql, params)
    return found[0] if found else None


def one_of(
    many: Callable[[Db, list[Any]], Awaitable[Sequence[Any]]],
) -> Callable[[Db, Any], Awaitable[Any]]:
    """A set-oriented operation applied to one call (for a lone call or a retried batch)."""

    async def one(db: Db, arg: Any) -> Any:
        [outcome] = await many(db, [arg])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return one


class SqliteTransactions:
    """The batcher's transaction statements, on SQLite."""

    async def begin(self, db: Db) -> None:
        # Takes the write lock before anything is read: a second process waits on
        # busy_timeout (on the driver's thread) instead of failing on a stale snapshot.
        await db.execute("BEGIN IMMEDIATE")

    async def commit(self, db: Db) -> None:
        await db.execute("COMMIT")

    async def rollback(self, db: Db) -> None:
        with contextlib.suppress(sqlite3.OperationalError):  # SQLite may have ended it itself
            await db.execute("ROLLBACK")

    async def savepoint(self, db: Db) -> None:
        await db.execute("SAVEPOINT store_call")

    async def release(self, db: Db) -> None:
        await db.execute("RELEASE store_call")

    async def rollback_to(self, db: Db) -> None:
        await db.execute("ROLLBACK TO store_call")
        await db.execute("RELEASE store_call")


class NoTransactions:
    """Reads need no transaction: each statement sees what was committed when it ran."""

    async def begin(self, db: Db) -> None:
        return None

    async def commit(self, db: Db) -> None:
        return None

    async def rollback(self, db: Db) -> None:
        return None

    async def savepoint(self, db: Db) -> None:
        return None

    async def release(self, db: Db) -> None:
        return None

    async def rollback_to(self, db: Db) -> None:
        return None


async def _read_one(db: Db, body: Callable[[Db], Awaitable[Any]]) -> Any:
    return await body(db)


async def _read_many(db: Db, bodies: list[Callable[[Db], Awaitable[Any]]]) -> list[Any]:
    """Unrelated reads: all handed to the driver at once; each caller gets its own error."""
    results = await asyncio.gather(*(body(db) for body in bodies), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    return results


READ: Op[Db, Callable[[Db], Awaitable[Any]], Any] = Op(
    "read", one=_read_one, lone=_read_one, many=_read_many
)
