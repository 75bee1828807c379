"""Noticing that an aiosqlite connection's worker thread died, and failing its calls then.

Owns: `WatchedConnection` (an aiosqlite connection that knows the calls waiting on its thread
and can fail them all) and `Drivers` (per store: checks its connections' threads once a
second, from the store's open to its close, and stops them if the store is forgotten).

Why: aiosqlite runs every statement on one thread per connection and answers through a
future; if that thread ends (an error outside its own `try`), nothing answers: every caller,
the platform listener awaiting an accept among them, would wait forever. Instead:
- every call waiting on a dead thread fails with `sqlite3.OperationalError` (a storage
  failure: people are told the database is unavailable), and every later call at once;
- one ERROR line says the store is unhealthy. The store is not reopened in place: the dead
  thread's sqlite3 connection may hold an open transaction (and the file's write lock) that
  only that thread may roll back, so the way out is a restart; what was committed before is
  in the file (WAL), and an uncommitted call was never acknowledged.

Cost per call: adding and removing its future in a set. The check itself runs once a second.

Relies on aiosqlite's internals (`_execute`, `_tx`, `_thread`, `_running`, `_connection`),
as of aiosqlite 0.21-0.22; `tests/storage/test_sqlite_watchdog.py` pins them.

Must not: import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import aiosqlite

log = logging.getLogger(__name__)

UNHEALTHY = "the SQLite store is unhealthy: its worker thread stopped; restart Teammate"
# How often the watchdog looks at the threads: the longest a call waits on a dead one.
CHECK_EVERY_S = 1.0


def stopped() -> sqlite3.OperationalError:
    return sqlite3.OperationalError("the database worker stopped")


class WatchedConnection(aiosqlite.Connection):
    """An aiosqlite connection whose waiting calls can all be failed (`fail`) when its worker
    thread is found dead, and which then refuses calls at once."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int) -> None:
        super().__init__(connector, iter_chunk_size)
        self._waiting: set[asyncio.Future[Any]] = set()
        self._failed = False

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # aiosqlite's own, plus the set of waiting futures.
        if self._failed:
            raise stopped()
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        future = asyncio.get_running_loop().create_future()
        self._tx.put_nowait((future, partial(fn, *args, **kwargs)))
        self._waiting.add(future)
        try:
            return await future
        finally:
            self._waiting.discard(future)

    def worker_died(self) -> bool:
        """Its thread ended while the connection was open (not stopped by `close`)."""
        return self._running and not self._failed and not self._thread.is_alive()

    def fail(self) -> None:
        """Fail every call waiting on the dead thread, and every later one."""
        self._failed = True
        for future in self._waiting:
            if not future.done():
                future.set_exception(stopped())

    async def close(self) -> None:
        if self._failed:  # nothing would answer: forget the connection instead
            self._running = False
            self._connection = None
            return
        await super().close()


def connect(database: str, **kwargs: Any) -> WatchedConnection:
    """`aiosqlite.connect`, for a `WatchedConnection`."""
    return WatchedConnection(partial(sqlite3.connect, database, **kwargs), 64)


class Drivers:
    """A store's aiosqlite connections, looked after until the store is closed: their threads
    are checked every `CHECK_EVERY_S` (one that died has its calls failed, and `UNHEALTHY` is
    logged once), and stopped if the store is forgotten unclosed."""

    def __init__(self, store: object, connections: Sequence[aiosqlite.Connection]) -> None:
        self._finalizer = weakref.finalize(store, _stop_all, list(connections))
        watched = [c for c in connections if isinstance(c, WatchedConnection)]
        self._task = asyncio.get_running_loop().create_task(_watch(watched))

    def closed(self) -> None:
        """The store closed its connections: nothing more to watch or stop."""
        self._finalizer.detach()
        self._task.cancel()


def _stop_all(connections: list[aiosqlite.Connection]) -> None:
    for connection in connections:
        connection.stop()


async def _watch(connections: list[WatchedConnection]) -> None:
    # Holds the connections, never the store: a forgotten store is still collected (its
    # finalizer stops the connections, and this ends).
    told = False
    while any(c._running for c in connections):
        await asyncio.sleep(CHECK_EVERY_S)
        for connection in connections:
            if connection.worker_died():
                connection.fail()
                if not told:
                    log.error(UNHEALTHY)
                    told = True
