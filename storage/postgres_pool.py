"""A small connection pool for the PostgreSQL store: idle connections, a size limit, waiters.

Owns: handing out and taking back asyncpg connections. asyncpg's own pool costs about as much
per call as a round trip to a local server (a proxy object, timeouts, a reset query on
release); the store needs none of that — it never leaves session state on a connection — so
each call pays only for the list pop and push here (`benchmarks/pg_bench.py`).

- `acquire()` gives an idle connection, opens one while below `max_size`, or waits (first come,
  first served) for one to come back.
- A connection is dropped instead of reused when it closed, is still inside a transaction, or
  its user was interrupted mid-call (cancelled) or timed out: its protocol state is unknown.
- Every statement has a bound (`STATEMENT_TIMEOUT_S`): on a connection gone silent (half-open:
  no error, no close) one would otherwise wait for good, holding its conversation and the
  store's close. It then fails as a storage failure (`TimeoutError`).

Must not: import `tools` or `bots`; know any SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

# Far past any statement the store makes (a console search over a large history included);
# a migration, which may rewrite a large table, passes its own.
STATEMENT_TIMEOUT_S = 120.0


async def connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(url, command_timeout=STATEMENT_TIMEOUT_S)


class Pool:
    """Connections to one database. Create with `await Pool.open(url, ...)`."""

    def __init__(self, url: str, min_size: int, max_size: int) -> None:
        self._url = url
        self._max_size = max(1, max_size)
        self._min_size = min(min_size, self._max_size)
        self._idle: list[asyncpg.Connection] = []
        self._size = 0  # open or opening
        self._waiters: deque[asyncio.Future[asyncpg.Connection]] = deque()
        self._closed = False

    @classmethod
    async def open(cls, url: str, *, min_size: int, max_size: int) -> Pool:
        pool = cls(url, min_size, max_size)
        try:
            for _ in range(pool._min_size):
                pool._size += 1
                try:
                    pool._idle.append(await connect(url))
                except BaseException:
                    pool._size -= 1
                    raise
        except BaseException:
            await pool.close()
            raise
        return pool

    def get_max_size(self) -> int:
        return self._max_size

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        connection = await self._take()
        try:
            yield connection
        except (asyncio.CancelledError, TimeoutError):
            self._drop(connection)  # interrupted mid-call, or silent: its state is unknown
            raise
        except BaseException:
            self._give_back(connection)
            raise
        else:
            self._give_back(connection)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.acquire() as connection:
            return list(await connection.fetch(query, *args))

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.acquire() as connection:
            return await connection.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.acquire() as connection:
            return str(await connection.execute(query, *args))

    async def close(self) -> None:
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RuntimeError("the connection pool is closed"))
        idle, self._idle = self._idle, []
        self._size -= len(idle)
        # All at once: over a network gone silent each goodbye waits out its timeout, and one
        # after another they would outlast an orchestrator's grace before SIGKILL.
        await asyncio.gather(*(_close_quietly(c) for c in idle))

    async def _take(self) -> asyncpg.Connection:
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        while self._idle:
            connection = self._idle.pop()
            if not connection.is_closed():
                return connection
            self._size -= 1
        if self._size < self._max_size:
            self._size += 1
            try:
                return await connect(self._url)
            except BaseException:
                self._size -= 1
                self._wake_one_to_connect()
                raise
        waiter: asyncio.Future[asyncpg.Connection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._give_back(waiter.result())  # handed over just as we gave up
            raise

    def _give_back(self, connection: asyncpg.Connection) -> None:
        if connection.is_closed() or connection.is_in_transaction():
            self._drop(connection)
            return
        if self._closed:
            self._drop(connection)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append(connection)

    def _drop(self, connection: asyncpg.Connection) -> None:
        self._size -= 1
        connection.terminate()
        self._wake_one_to_connect()

    def _wake_one_to_connect(self) -> None:
        """A slot freed up: the first waiter opens a connection of its own."""
        while self._waiters and self._size < self._max_size:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._size += 1
            task = asyncio.ensure_future(connect(self._url))

            def handed(done: asyncio.Future[asyncpg.Connection], waiter: Any = waiter) -> None:
                if done.cancelled() or done.exception() is not None:
                    self._size -= 1
                    if not waiter.done():
                        waiter.set_exception(done.exception() or RuntimeError("could not connect"))
                elif waiter.done():  # its caller gave up meanwhile
                    self._give_back(done.result())
                else:
                    waiter.set_result(done.result())

            task.add_done_callback(handed)
            return


async def _close_quietly(connection: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        await connection.close(timeout=5)
