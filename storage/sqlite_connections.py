"""The SQLite store's connections: opening a file, and how every call reaches the driver.

Owns: `SqliteConnections`, the part of `SqliteStore` that holds its two connections (a writer
and, but for `":memory:"`, a reader) and their batchers: opening a file (checks, pragmas,
migrations, the writer's TEMP objects: `sqlite_triggers`), the full integrity check for
`teammate doctor`, closing, and `_write`/`_read`, through which the store's methods run their
calls (`storage.batching` decides when calls run alone and when together). `SqliteStore`
(`storage/sqlite.py`) adds the contract's methods.

Must not: hold the SQL of a store method; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from storage.batching import Batcher, Op
from storage.opening import Opening
from storage.records import SchemaError
from storage.sqlite_migrations import (
    MIGRATIONS,
    Migration,
    inspect,
    integrity_problems,
    migrate,
    refuse_damaged,
)
from storage.sqlite_ops import READ, Db, NoTransactions, SqliteTransactions, fetchall
from storage.sqlite_triggers import ACCEPT_SETUP, DELIVER_TRIGGER, LAST_SEQ_TRIGGER, START_SETUP
from storage.sqlite_watchdog import Drivers, connect

T = TypeVar("T")
Clock = Callable[[], float]


async def _connect(
    path: str,
    busy_timeout_s: float,
    setup: Callable[[sqlite3.Connection], None],
    *,
    parses_messages: bool,
) -> Db:
    """An aiosqlite connection whose sqlite3 connection runs `setup` on the driver's thread
    as it is made (checks, pragmas, migrations: synchronous, as `storage.sqlite_migrations` is).

    A connection that cannot be made or set up is closed (waiting for its thread) before the
    error is raised: aiosqlite's own failure path leaves its thread to stop unobserved."""
    failed: list[Exception] = []

    class Connection(sqlite3.Connection):
        def __init__(self, database: str, *args: Any, **kwargs: Any) -> None:
            try:
                super().__init__(database, *args, **kwargs)
            except sqlite3.Error as exc:
                failed.append(exc)
                super().__init__(":memory:")  # a stand-in, closed at once below
                return
            try:
                setup(self)
            except Exception as exc:
                failed.append(exc)

    db = await connect(
        path,
        timeout=busy_timeout_s,
        isolation_level=None,  # autocommit: every transaction here is explicit
        # Columns named "x [teammate_message]" are parsed as fetched (the connection reads).
        detect_types=sqlite3.PARSE_COLNAMES if parses_messages else 0,
        cached_statements=256,
        factory=Connection,
    )
    if failed:
        await db.close()
        raise failed[0]
    return db


class SqliteConnections:
    """A SQLite file's two connections and how calls reach them (`SqliteStore`'s base)."""

    def __init__(self, writer: Db, reader: Db | None, path: str, clock: Clock) -> None:
        # Use `open()`: it checks the file, sets the pragmas, migrates and connects.
        self._writer = writer
        self._reader = reader  # None for ":memory:": reads queue with the writes
        self._batcher: Batcher[Db] = Batcher(writer, SqliteTransactions())
        # Reads batch the same way on their own connection, with no transaction to open.
        self._readers = None if reader is None else Batcher(reader, NoTransactions())
        self._path = path
        self._clock = clock
        self._closed = False
        # Dead driver threads fail their calls; a store forgotten unclosed stops its threads.
        self._drivers = Drivers(self, [c for c in (writer, reader) if c is not None])

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        clock: Clock = time.time,
        busy_timeout_s: float = 10.0,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Opening[Self]:
        """Open (creating or upgrading) the database at `path`; await it or `async with` it.

        Raises `SchemaError` for a file that is not a Teammate database or was written by a
        newer Teammate, and `DatabaseDamaged` (a `SchemaError`) for one with damaged pages;
        such a file is left untouched. `":memory:"` gives a private, non-durable database.
        """
        return Opening(cls._open(str(path), clock, busy_timeout_s, migrations))

    @classmethod
    async def _open(
        cls, path: str, clock: Clock, busy_timeout_s: float, migrations: Sequence[Migration]
    ) -> Self:
        busy_ms = int(busy_timeout_s * 1000)

        def setup_writer(db: sqlite3.Connection) -> None:
            # Connection settings only; nothing is written before the file is recognised.
            db.execute(f"PRAGMA busy_timeout = {busy_ms:d}")
            db.execute("PRAGMA foreign_keys = ON")
            inspect(db, path, migrations)
            refuse_damaged(db, path)
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
            if path != ":memory:" and str(mode).lower() != "wal":
                raise SchemaError(f"{path}: could not switch to WAL mode (got {mode!r})")
            db.execute("PRAGMA synchronous = NORMAL")
            migrate(db, path, migrations)
            # Per connection, never in the file: another Teammate sees the plain schema.
            for statement in [LAST_SEQ_TRIGGER, DELIVER_TRIGGER, *ACCEPT_SETUP, *START_SETUP]:
                db.execute(statement)

        def setup_reader(db: sqlite3.Connection) -> None:
            db.execute(f"PRAGMA busy_timeout = {busy_ms:d}")
            db.execute("PRAGMA query_only = ON")  # this connection never writes

        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        memory = path == ":memory:"  # one connection, reading too
        writer = await _connect(path, busy_timeout_s, setup_writer, parses_messages=memory)
        reader: Db | None = None
        try:
            if path != ":memory:":
                reader = await _connect(path, busy_timeout_s, setup_reader, parses_messages=True)
        except BaseException:
            await writer.close()
            raise
        return cls(writer, reader, path, clock)

    async def integrity_check(self) -> list[str]:
        """Everything SQLite finds wrong with the file, indexes and foreign keys included
        (`[]`: healthy). Reads the whole file: for `teammate doctor`, not for a busy bot."""
        limit = 100

        async def body(db: Db) -> list[str]:
            try:
                found = await fetchall(db, f"PRAGMA integrity_check({limit:d})")
                problems = [str(row[0]) for row in found if str(row[0]) != "ok"]
                orphans = (await fetchall(db, "PRAGMA foreign_key_check"))[:limit]
            except sqlite3.DatabaseError as exc:
                return [str(exc)]
            problems += [f"{row[0]} row {row[1]} refers to a missing {row[2]}" for row in orphans]
            return problems[:limit]

        return await self._read(body)

    @staticmethod
    async def check_file(path: str | Path) -> list[str]:
        """The full check of a file the store would refuse to open (e.g. `DatabaseDamaged`),
        read-only and off the event loop; a missing file is reported, never created."""

        def check() -> list[str]:
            try:
                db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
            except sqlite3.Error as exc:
                return [f"{path}: {exc}"]
            try:
                return integrity_problems(db, full=True)
            finally:
                db.close()

        return await asyncio.to_thread(check)

    async def close(self) -> None:
        """Finish every call already made, then close the connections."""
        if self._closed:
            return
        self._closed = True
        await self._batcher.drain()
        if self._readers is not None:
            await self._readers.drain()
        await self._writer.close()
        if self._reader is not None:
            await self._reader.close()
        self._drivers.closed()  # only now: a thread dying while calls drain is noticed

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def path(self) -> str:
        return self._path

    # --- running calls --------------------------------------------------------------------

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise RuntimeError(f"the store for {self._path} is closed")

    async def _write(self, op: Op[Db, Any, T], arg: Any) -> T:
        self._refuse_if_closed()
        return await self._batcher.submit(op, arg)

    async def _read(self, body: Callable[[Db], Awaitable[T]]) -> T:
        """Run `body`'s statements on the reader (committed data only); reads made together
        are handed to the driver together."""
        return await self._read_op(READ, body)

    async def _read_op(self, op: Op[Db, Any, T], arg: Any) -> T:
        self._refuse_if_closed()
        return await (self._readers or self._batcher).submit(op, arg)
