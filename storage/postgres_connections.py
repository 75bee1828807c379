"""The PostgreSQL store's connections: opening a database, and how every call reaches it.

Owns: `PostgresConnections`, the part of `PostgresStore` that holds its connection pool, its
`postgres_instances.Instances` (leases and notifications) and its batcher of appends: opening
a database (checks, then migrations), `describe` for `teammate doctor`, closing, and `_call`,
through which the store's methods run: each call on one pooled connection (in one transaction
if asked), as its own task, shielded from its caller, so it runs whole or not at all even if
the caller is cancelled; the database's clock (`now`); and `InstanceCoordination` (leases
and notifications between instances, delegated to `postgres_instances`). `PostgresStore`
(`storage/postgres.py`) adds the contract's methods.

Must not: hold the SQL of a store method; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import asyncpg

from storage.base import Fence, Notification
from storage.batching import Batcher
from storage.dsn import redact_dsn
from storage.opening import Opening
from storage.postgres_batch import PgTransactions
from storage.postgres_instances import Instances
from storage.postgres_migrations import MIGRATIONS, PgMigration, inspect, migrate
from storage.postgres_pool import Pool
from storage.postgres_schedules import database_time

T = TypeVar("T")
Clock = Callable[[], float]
Body = Callable[[asyncpg.Connection], Awaitable[T]]


class PostgresConnections:
    """A database's connection pool and how calls reach it (`PostgresStore`'s base)."""

    def __init__(self, pool: Pool, url: str, clock: Clock, schema: str, lease_ttl_s: float) -> None:
        # Use `open()`: it creates the pool, checks the schema and migrates.
        self._pool = pool
        self._instances = Instances(pool, url, schema, lease_ttl_s)
        # Appends are grouped (`postgres_batch`): half the pool at most carries them, so
        # other calls always find a connection.
        self._appends: Batcher[asyncpg.Connection] = Batcher.pooled(
            pool, PgTransactions(), lanes=max(1, pool.get_max_size() // 2)
        )
        self._url = url
        self._clock = clock
        self._schema = schema
        self._closed = False
        self._inflight: set[asyncio.Task[Any]] = set()

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock = time.time,
        min_connections: int = 2,
        max_connections: int = 10,
        lease_ttl_s: float = 30.0,
        migrations: Sequence[PgMigration] = MIGRATIONS,
    ) -> Opening[Self]:
        """Connect to `url` (creating or upgrading the schema); await it or `async with` it.

        Raises `SchemaError` for a schema that is not Teammate's or was written by a newer
        Teammate (nothing is changed then), and asyncpg's or OS errors when the server cannot
        be reached.
        """
        return Opening(
            cls._open(url, clock, min_connections, max_connections, lease_ttl_s, migrations)
        )

    @classmethod
    async def _open(
        cls,
        url: str,
        clock: Clock,
        min_connections: int,
        max_connections: int,
        lease_ttl_s: float,
        migrations: Sequence[PgMigration],
    ) -> Self:
        where = redact_dsn(url)
        pool = await Pool.open(url, min_size=min_connections, max_size=max_connections)
        try:
            async with pool.acquire() as connection:
                await migrate(connection, where, migrations)
                schema = str(await connection.fetchval("SELECT current_schema()"))
        except BaseException:
            await pool.close()
            raise
        store = cls(pool, url, clock, schema, lease_ttl_s)
        try:
            await store._instances.start()
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def url(self) -> str:
        """Where the store is, password redacted."""
        return redact_dsn(self._url)

    async def describe(self) -> dict[str, Any]:
        """The server's version, the schema and its version (for `teammate doctor`)."""

        async def body(connection: asyncpg.Connection) -> dict[str, Any]:
            version = await connection.fetchval("SHOW server_version")
            state = await inspect(connection, self.url)
            return {
                "server_version": str(version),
                "schema": state.schema,
                "version": state.version,
            }

        return await self._call(body)

    async def close(self) -> None:
        """Finish every call already made, then close the pool."""
        if self._closed:
            return
        self._closed = True
        if self._inflight:
            await asyncio.wait(list(self._inflight))
        await self._appends.drain()
        await self._instances.close()
        await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- transactions ---------------------------------------------------------------------

    def _call(self, body: Body[T], *, transaction: bool = False) -> Awaitable[T]:
        """Run `body` on a pooled connection (in one transaction if `transaction`; a single
        statement is one already), as its own task: a cancelled caller does not cut it off."""
        if self._closed:
            raise RuntimeError(f"the store for {self.url} is closed")
        return self._shielded(self._run(body, transaction))

    def _shielded(self, work: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """`work` as its own task, which `close()` waits for."""
        task = asyncio.ensure_future(work)
        self._inflight.add(task)
        task.add_done_callback(_settled(self._inflight))
        return asyncio.shield(task)

    async def _run(self, body: Body[T], transaction: bool) -> T:
        async with self._pool.acquire() as connection:
            if not transaction:
                return await body(connection)
            async with connection.transaction():
                return await body(connection)

    async def now(self) -> float:
        """The server's clock, which every instance shares (`ConversationStore.now`)."""
        return await self._call(database_time)

    # --- several instances (storage.base.InstanceCoordination) -----------------------------

    @property
    def shared(self) -> bool:
        """Other instances may run this database's conversations."""
        return True

    @property
    def instance_id(self) -> str:
        return self._instances.instance_id

    async def acquire_lease(self, conversation_id: int) -> bool:
        """Hold (or renew) the conversation's lease; False while another live instance does."""
        if self._closed:
            raise RuntimeError(f"the store for {self.url} is closed")
        return await asyncio.shield(self._instances.acquire(conversation_id))

    def took_over(self, conversation_id: int) -> bool:
        return self._instances.took_over(conversation_id)

    def fence(self, conversation_id: int) -> Fence | None:
        """The held lease as the token its runs' writes carry (`postgres_fencing`)."""
        return self._instances.fence(conversation_id)

    def fresh(self, fence: Fence) -> bool:
        """Whether the lease may still be ours by this instance's own clock."""
        return self._instances.fresh(fence)

    def let_lapse(self, conversation_id: int) -> None:
        self._instances.let_lapse(conversation_id)

    async def release_lease(self, conversation_id: int) -> None:
        if not self._closed:
            await asyncio.shield(self._instances.release(conversation_id))

    async def publish_stop(
        self,
        conversation_key: str,
        run_id: int | None,
        *,
        by_id: str | None = None,
        by_name: str | None = None,
    ) -> None:
        """Ask whichever instance runs the conversation to stop it."""
        await self._instances.publish_stop(conversation_key, run_id, by_id, by_name)

    def notifications(self) -> AsyncIterator[Notification]:
        """Other instances' new inbox items and stop requests, and leases this one lost."""
        return self._instances.notifications()


def _settled(inflight: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that gave up is not told twice

    return done
