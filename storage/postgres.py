"""The PostgreSQL backend of `ConversationStore`, on asyncpg: for several Teammate instances
on one database (docs/architecture.md, "Storage" and "Several instances").

Owns: the SQL behind every store method on PostgreSQL, the connection pool, opening a
database (checks, then migrations), conversation leases and the notifications instances send
each other. Mapping rows to records is `storage.rows` (shared with SQLite); the statements
several methods share are `postgres_rows`; the schema is `postgres_migrations`.

How it stays correct and fast:
- Each store method is ONE transaction on one pooled connection, in as few round trips as
  the SQL allows: a single statement where one will do (an append is one `UPDATE ...
  RETURNING` feeding an `INSERT` through a CTE), arrays (`= ANY($1::bigint[])`, `unnest`)
  instead of a statement per item, `RETURNING` instead of reading back.
- A method runs whole or not at all even if its caller is cancelled: it runs as its own task,
  shielded from the caller (a cancelled append may still have happened, as on SQLite).
- Cross-instance races are settled by the database: a delivery id is a primary key (the
  second claimer waits for the first to commit, then sees the conflict), inbox items are
  locked (`FOR UPDATE`) before they are delivered, and a conversation's row is locked by
  every append, so seqs stay gap-free with any number of writers.
- `close()` waits for the calls already made, then closes the pool.

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from core.messages import Message, Usage, UserMessage, dump_message
from storage import postgres_memory as memory
from storage import postgres_rows as pg_rows
from storage import postgres_schedules as scheduling
from storage import rows
from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    ConversationStore,
    FeedbackTally,
    InboxItem,
    InstanceCoordination,
    LoadedConversation,
    MemoryNote,
    Notification,
    RunOutcome,
    RunRecord,
    Schedule,
    StoredMessage,
    UsageSummary,
    Vote,
)
from storage.batching import Batcher
from storage.dsn import redact_dsn
from storage.postgres_batch import APPEND, AppendCall, PgTransactions
from storage.postgres_instances import Instances
from storage.postgres_migrations import MIGRATIONS, PgMigration, inspect, migrate
from storage.postgres_pool import Pool

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], float]
Body = Callable[[asyncpg.Connection], Awaitable[T]]

# How many accepted, not yet delivered messages a store keeps in memory (see `_accepted`).
_ACCEPTED_KEPT = 4096


def redact_url(url: str) -> str:
    """`url` without its secrets (for logs, errors and `teammate doctor`): storage.dsn."""
    return redact_dsn(url)


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).split(":", 1)[0] in ("postgresql", "postgres")


class _Repeated(Exception):
    """A delivery claimed before: the accepting statement (or transaction) is undone."""


class PostgresStore:
    """Persisted conversations in a PostgreSQL database, shared by any number of instances.

        async with PostgresStore.open("postgresql://teammate@db/teammate") as store: ...

    The tables live in the connection's current schema (`?search_path=...` in the URL picks
    another). Methods given an unknown conversation or run id raise `KeyError`.
    """

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
        # Messages this store accepted and has not yet delivered or dropped, by inbox item id
        # (with their conversation): `deliver` hands back the very object accepted instead
        # of parsing it again. Bounded; a miss (another instance accepted it, a restart)
        # just parses the stored body.
        self._accepted: dict[int, tuple[int, Message]] = {}

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
    ) -> _Opening:
        """Connect to `url` (creating or upgrading the schema); await it or `async with` it.

        Raises `SchemaError` for a schema that is not Teammate's or was written by a newer
        Teammate (nothing is changed then), and asyncpg's or OS errors when the server cannot
        be reached.
        """
        return _Opening(
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
    ) -> PostgresStore:
        where = redact_url(url)
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
        return redact_url(self._url)

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

    async def __aenter__(self) -> PostgresStore:
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

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> Conversation:
            row = await connection.fetchrow(
                "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
                "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (key) DO NOTHING "
                f"RETURNING {rows.CONVERSATION_COLUMNS}",
                key,
                channel_key,
                title,
                now,
            )
            if row is None:  # it existed; this later statement sees it even if just committed
                row = await connection.fetchrow(
                    f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = $1", key
                )
            assert row is not None
            return rows.conversation_from(row)

        return await self._call(body)

    async def get_conversation(self, key: str) -> Conversation | None:
        async def body(connection: asyncpg.Connection) -> Conversation | None:
            row = await connection.fetchrow(
                f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = $1", key
            )
            return None if row is None else rows.conversation_from(row)

        return await self._call(body)

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""

        async def body(connection: asyncpg.Connection) -> list[Conversation]:
            found = await connection.fetch(
                f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE channel_key = $1 "
                "ORDER BY id DESC LIMIT $2",
                channel_key,
                max(0, limit),
            )
            return [rows.conversation_from(row) for row in found]

        return await self._call(body)

    async def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> Conversation:
        """Set the title and/or replace the settings; `None` leaves a field as it is."""
        settings_json = None if settings is None else rows.dump_json(settings)
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> Conversation:
            row = await connection.fetchrow(
                "UPDATE conversations SET title = COALESCE($1, title), "
                "settings = COALESCE($2::jsonb, settings), updated_at = $3 WHERE id = $4 "
                f"RETURNING {rows.CONVERSATION_COLUMNS}",
                title,
                settings_json,
                now,
                conversation_id,
            )
            if row is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return rows.conversation_from(row)

        return await self._call(body)

    # --- messages -------------------------------------------------------------------------

    async def append_message(
        self,
        conversation_id: int,
        message: Message,
        *,
        run_id: int | None = None,
        usage: Usage | None = None,
        model: str | None = None,
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns.
        With `usage` (needing `run_id`): its ledger entry in the same statement (nothing for
        a reply that used no tokens)."""
        if usage is not None and run_id is None:
            raise ValueError("usage is recorded against a run: give run_id")
        body_json = dump_message(message).decode()
        charge = usage if usage is not None and usage.total_tokens > 0 else None
        call = AppendCall(conversation_id, message, body_json, run_id, self._clock(), charge, model)
        # Grouped with other appends while the database is busy (`postgres_batch`); an
        # unknown run is a KeyError (the message's foreign key), as from record_usage.
        if self._closed:
            raise RuntimeError(f"the store for {self.url} is closed")
        seq = await self._appends.submit(APPEND, call)  # runs whole if the caller goes
        return StoredMessage(seq=seq, message=message)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after it: ONE
        statement, so one snapshot."""

        async def body(connection: asyncpg.Connection) -> LoadedConversation:
            row = await connection.fetchrow(pg_rows.LOAD, conversation_id)
            if row is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            compaction = (
                None if row[7] is None else rows.compaction_from(conversation_id, row[7:12])
            )
            found = list(zip(row[12] or (), row[13] or (), strict=True))
            conversation = rows.conversation_from(row)
            return LoadedConversation(conversation, compaction, rows.stored_messages(found))

        return await self._call(body)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""

        async def body(connection: asyncpg.Connection) -> list[StoredMessage]:
            found = await connection.fetch(
                "SELECT seq, body FROM messages WHERE conversation_id = $1 AND seq > $2 "
                "ORDER BY seq",
                conversation_id,
                seq,
            )
            return rows.stored_messages(found)

        return await self._call(body)

    async def message_count(self, conversation_id: int) -> int:
        async def body(connection: asyncpg.Connection) -> int:
            value = await connection.fetchval(
                "SELECT last_seq FROM conversations WHERE id = $1", conversation_id
            )
            if value is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return int(value)

        return await self._call(body)

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed by any instance, False for every
        repeat (durably)."""
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> bool:
            return await _claim(connection, delivery_id, now)

        return await self._call(body)

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many."""
        cutoff = self._clock() - older_than_s

        async def body(connection: asyncpg.Connection) -> int:
            status = await connection.execute(
                "DELETE FROM deliveries WHERE claimed_at < $1", cutoff
            )
            return int(status.rsplit(" ", 1)[1])

        return await self._call(body)

    # --- the inbox ------------------------------------------------------------------------

    async def accept_delivery(
        self,
        conversation_key: str,
        message: Message,
        *,
        channel_key: str,
        delivery_id: str | None,
        backfill: Sequence[Message] = (),
        title: str | None = None,
        surface_ref: dict[str, Any] | None = None,
        also_claim: Sequence[str] = (),
    ) -> Accepted | None:
        """Claim, get or create, backfill a new conversation, and queue `message`: ONE
        transaction. None for a repeated `delivery_id` (from this instance or another), or
        when any id in `also_claim` (more names of the same delivery) was claimed before."""
        now = self._clock()
        claims = list(
            dict.fromkeys([*([delivery_id] if delivery_id is not None else []), *also_claim])
        )
        body_json = dump_message(message).decode()
        ref_json = rows.dump_json(surface_ref or {})
        earlier = [(m, dump_message(m).decode()) for m in backfill]

        author_id = author_name = platform_id = None
        if isinstance(message, UserMessage):
            platform_id = message.platform_message_id
            if message.author is not None:
                author_id, author_name = message.author.id, message.author.name

        async def body(connection: asyncpg.Connection) -> Accepted | None:
            # One statement: claim, get or create (the upsert locks the conversation's row,
            # so a concurrent first message waits and then finds `accepted` > 0), queue, and
            # notify the other instances on commit.
            try:
                row = await connection.fetchrow(
                    pg_rows.ACCEPT
                    + ", "
                    + self._instances.inbox_notify_sql("$12", "conv.id", "$5", "item.id", "$13"),
                    claims,
                    body_json,
                    ref_json,
                    now,
                    conversation_key,
                    channel_key,
                    title,
                    author_id,
                    author_name,
                    platform_id,
                    delivery_id,
                    self._instances.channel,
                    self._instances.instance_id,
                )
            except asyncpg.UniqueViolationError:  # claimed before (here or elsewhere)
                raise _Repeated from None
            assert row is not None
            conversation = rows.conversation_from(row)
            # New means nothing was ever said here: no history and nothing accepted before.
            created = int(row[7]) == 0 and int(row[8]) == 1
            if created and earlier:
                await pg_rows.append_many(connection, conversation.id, earlier, None, now)
            item = InboxItem(
                id=int(row[9]),
                conversation_id=conversation.id,
                message=message,
                surface_ref=json.loads(ref_json),
                received_at=now,
            )
            return Accepted(conversation=conversation, item=item, created=created)

        # A backfill is a second statement, so then (only) a transaction.
        try:
            accepted = await self._call(body, transaction=bool(earlier))
        except _Repeated:
            return None  # a repeated delivery: the statement (or transaction) was undone
        if accepted is not None:  # committed: its id is final
            if len(self._accepted) >= _ACCEPTED_KEPT:
                del self._accepted[next(iter(self._accepted))]
            self._accepted[accepted.item.id] = (accepted.conversation.id, message)
        return accepted

    def _known(self, conversation_id: int, item_ids: list[int]) -> dict[int, Message]:
        return {
            item_id: entry[1]
            for item_id in item_ids
            if (entry := self._accepted.get(item_id)) is not None and entry[0] == conversation_id
        }

    def _forget(self, item_ids: list[int]) -> None:
        for item_id in item_ids:
            self._accepted.pop(item_id, None)

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""

        async def body(connection: asyncpg.Connection) -> list[InboxItem]:
            found = await connection.fetch(
                "SELECT i.id, i.body, i.surface_ref, i.received_at FROM conversations c "
                "LEFT JOIN inbox i ON i.conversation_id = c.id AND i.state = 'pending' "
                "WHERE c.id = $1 ORDER BY i.id",
                conversation_id,
            )
            if not found:
                raise KeyError(f"no conversation with id {conversation_id}")
            return [rows.inbox_item(conversation_id, row) for row in found if row[0] is not None]

        return await self._call(body)

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""

        async def body(connection: asyncpg.Connection) -> list[int]:
            found = await connection.fetch(
                "SELECT conversation_id FROM inbox WHERE state = 'pending' "
                "GROUP BY conversation_id ORDER BY MIN(id)"
            )
            return [int(row[0]) for row in found]

        return await self._call(body)

    async def deliver(
        self, conversation_id: int, item_ids: Sequence[int], *, run_id: int | None = None
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one statement; items already settled are skipped."""
        ids = list(dict.fromkeys(item_ids))  # an id given twice is delivered once
        now = self._clock()
        known = self._known(conversation_id, ids)

        async def body(connection: asyncpg.Connection) -> list[StoredMessage]:
            try:
                row = await connection.fetchrow(pg_rows.DELIVER, conversation_id, ids, now, run_id)
            except asyncpg.ForeignKeyViolationError:
                raise KeyError(f"no run with id {run_id}") from None
            return pg_rows.delivered(conversation_id, row, known)

        stored = await self._call(body) if ids else []
        self._forget(ids)
        return stored

    async def drop(self, conversation_id: int, item_ids: Sequence[int], reason: str) -> None:
        """Mark pending items as not to be answered; they never enter history."""
        ids = list(dict.fromkeys(item_ids))
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> None:
            # One statement: writes nothing unless every id is this conversation's.
            known = await connection.fetchval(
                "WITH known AS (SELECT id FROM inbox WHERE id = ANY($1::bigint[]) "
                "AND conversation_id = $2), "
                "dropped AS (UPDATE inbox SET state = 'dropped', settled_at = $3, reason = $4 "
                "WHERE id IN (SELECT id FROM known) AND state = 'pending' "
                "AND (SELECT count(*) FROM known) = cardinality($1::bigint[])) "
                "SELECT count(*) FROM known",
                ids,
                conversation_id,
                now,
                reason,
            )
            if int(known) != len(ids):
                raise KeyError(f"unknown inbox items among {ids} in {conversation_id}")

        await self._call(body)
        self._forget(ids)

    # --- runs -----------------------------------------------------------------------------

    async def start_run(
        self,
        conversation_id: int,
        *,
        user_id: str | None = None,
        channel_key: str | None = None,
        model: str | None = None,
        surface_ref: dict[str, Any] | None = None,
        owner: dict[str, Any] | None = None,
        deliver: Sequence[int] = (),
    ) -> RunRecord:
        """Record a run as "running" (`channel_key` defaults to the conversation's), and
        deliver `deliver` to it in the same transaction (an unknown item: `KeyError`, no run)."""
        now = self._clock()
        surface_json = rows.dump_json(surface_ref or {})
        owner_json = rows.dump_json(owner or {})
        ids = list(dict.fromkeys(deliver))
        known = self._known(conversation_id, ids)

        def record(run_id: int, key: str, run_channel: str | None) -> RunRecord:
            # A new run has no ledger entries yet: its usage is zero without asking.
            return RunRecord(
                id=run_id,
                conversation_id=conversation_id,
                conversation_key=key,
                outcome="running",
                started_at=now,
                finished_at=None,
                user_id=user_id,
                channel_key=run_channel,
                model=model,
                usage=Usage(),
                error=None,
                surface_ref=json.loads(surface_json),
                owner=json.loads(owner_json),
            )

        async def body(connection: asyncpg.Connection) -> RunRecord:
            if ids:  # the run and its first messages: one statement
                row = await connection.fetchrow(
                    pg_rows.START_RUN_DELIVERING,
                    conversation_id,
                    ids,
                    now,
                    user_id,
                    channel_key,
                    model,
                    surface_json,
                    owner_json,
                )
                pg_rows.delivered(conversation_id, row, known)
                assert row is not None
                return record(int(row[1]), str(row[3]), row[2])
            row = await connection.fetchrow(
                "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, "
                "model, surface_ref, owner) "
                "SELECT id, 'running', $2, $3, COALESCE($4, channel_key), $5, $6::jsonb, "
                "$7::jsonb FROM conversations WHERE id = $1 RETURNING id, channel_key, "
                "(SELECT key FROM conversations WHERE id = $1)",
                conversation_id,
                now,
                user_id,
                channel_key,
                model,
                surface_json,
                owner_json,
            )
            if row is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return record(int(row[0]), str(row[2]), row[1])

        started = await self._call(body)
        self._forget(ids)
        return started

    async def finish_run(
        self, run_id: int, outcome: RunOutcome, *, error: str | None = None
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger. The first finish
        wins: a finished run is returned as it was."""
        if outcome == "running" or outcome not in rows.OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> RunRecord:
            row = await connection.fetchrow(pg_rows.FINISH_RUN, outcome, error, now, run_id)
            if row is None:  # finished already (the first finish wins), or unknown
                return await pg_rows.run_by_id(connection, run_id)
            return rows.run_record(row)

        return await self._call(body)

    async def set_run_surface_ref(self, run_id: int, ref: dict[str, Any]) -> RunRecord:
        """Replace where a run is shown, so that recovery after a restart can edit it."""
        ref_json = rows.dump_json(ref)

        async def body(connection: asyncpg.Connection) -> RunRecord:
            # One statement: a run's ref changes a few times per answer (its messages posted).
            row = await connection.fetchrow(pg_rows.SET_SURFACE_REF, ref_json, run_id)
            if row is None:
                raise KeyError(f"no run with id {run_id}")
            return rows.run_record(row)

        return await self._call(body)

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: the ones a crash may have interrupted."""

        async def body(connection: asyncpg.Connection) -> list[RunRecord]:
            found = await connection.fetch(
                f"{pg_rows.RUN_SELECT} WHERE r.outcome = 'running' ORDER BY r.started_at, r.id"
            )
            return [rows.run_record(row) for row in found]

        return await self._call(body)

    # --- compactions ----------------------------------------------------------------------

    async def add_compaction(
        self,
        conversation_id: int,
        summary: str,
        up_to_seq: int,
        details: dict[str, Any] | None = None,
    ) -> Compaction:
        """Store `summary` as standing in for messages 1..`up_to_seq` (which must exist)."""
        now = self._clock()
        details_json = rows.dump_json(details or {})

        async def body(connection: asyncpg.Connection) -> Compaction:
            row = await connection.fetchrow(
                "WITH c AS (SELECT last_seq FROM conversations WHERE id = $1), "
                "added AS (INSERT INTO compactions (conversation_id, summary, up_to_seq, "
                "details, created_at) SELECT $1, $2, $3::bigint, $4::jsonb, $5 FROM c "
                "WHERE $3::bigint > 0 AND $3::bigint <= c.last_seq RETURNING id) "
                "SELECT c.last_seq, (SELECT id FROM added) FROM c",
                conversation_id,
                summary,
                up_to_seq,
                details_json,
                now,
            )
            if row is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            if row[1] is None:
                raise ValueError(
                    f"up_to_seq {up_to_seq} is outside the conversation's messages 1..{row[0]}"
                )
            return Compaction(
                id=int(row[1]),
                conversation_id=conversation_id,
                summary=summary,
                up_to_seq=up_to_seq,
                created_at=now,
                details=json.loads(details_json),
            )

        return await self._call(body)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> None:
            await _record_usage(connection, run_id, usage, model, now)

        await self._call(body)

    async def usage_since(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> Usage:
        """Total usage recorded at or after `since`, narrowed by every filter given."""
        where = ["at >= $1"]
        params: list[Any] = [since]
        for column, value in (
            ("conversation_id", conversation_id),
            ("user_id", user_id),
            ("channel_key", channel_key),
        ):
            if value is not None:
                params.append(value)
                where.append(f"{column} = ${len(params)}")
        sql = f"SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}"

        async def body(connection: asyncpg.Connection) -> Usage:
            row = await connection.fetchrow(sql, *params)
            assert row is not None
            return rows.usage_of(row)

        return await self._call(body)

    async def usage_summary(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> UsageSummary:
        """Usage, runs started and votes cast at or after `since`, narrowed by every filter
        given (a vote is in scope when its run is): one statement, one snapshot."""
        filters = {
            "conversation_id": conversation_id,
            "user_id": user_id,
            "channel_key": channel_key,
        }
        given = {column: value for column, value in filters.items() if value is not None}
        params: list[Any] = [since, *given.values()]

        def scope(table: str) -> str:
            return "".join(f" AND {table}.{column} = ${n}" for n, column in enumerate(given, 2))

        sql = (
            f"SELECT l.*, r.n, v.up, v.down FROM "
            f"(SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE at >= $1"
            f"{scope('usage_ledger')}) AS l, "
            f"(SELECT count(*) AS n FROM runs WHERE started_at >= $1{scope('runs')}) AS r, "
            "(SELECT count(*) FILTER (WHERE f.vote = 'up') AS up, "
            "count(*) FILTER (WHERE f.vote = 'down') AS down "
            f"FROM run_feedback f JOIN runs ON runs.id = f.run_id WHERE f.at >= $1"
            f"{scope('runs')}) AS v"
        )

        async def body(connection: asyncpg.Connection) -> UsageSummary:
            row = await connection.fetchrow(sql, *params)
            assert row is not None
            return UsageSummary(
                usage=rows.usage_of(row[:5]),
                runs=int(row[5]),
                votes_up=int(row[6]),
                votes_down=int(row[7]),
            )

        return await self._call(body)

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(
        self, run_id: int, user_id: str, vote: Vote | None, *, channel_key: str | None = None
    ) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> FeedbackTally:
            # Locks the run's row: votes on one run are counted one after another.
            if (
                await connection.fetchval(
                    "SELECT true FROM runs WHERE id = $1 "
                    "AND ($2::text IS NULL OR channel_key = $2) FOR KEY SHARE",
                    run_id,
                    channel_key,
                )
                is None
            ):
                raise KeyError(f"no run {run_id}" + (f" in {channel_key}" if channel_key else ""))
            if vote is None:
                await connection.execute(
                    "DELETE FROM run_feedback WHERE run_id = $1 AND user_id = $2", run_id, user_id
                )
            else:
                await connection.execute(
                    "INSERT INTO run_feedback (run_id, user_id, vote, at) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (run_id, user_id) DO UPDATE SET vote = EXCLUDED.vote, "
                    "at = EXCLUDED.at",
                    run_id,
                    user_id,
                    vote,
                    now,
                )
            tally = await connection.fetchrow(
                "SELECT count(*) FILTER (WHERE vote = 'up'), count(*) FILTER (WHERE vote = 'down') "
                "FROM run_feedback WHERE run_id = $1",
                run_id,
            )
            assert tally is not None
            return FeedbackTally(up=int(tally[0]), down=int(tally[1]))

        return await self._call(body, transaction=True)

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""

        async def body(connection: asyncpg.Connection) -> dict[str, Any] | None:
            text = await connection.fetchval(
                "SELECT config FROM channel_config WHERE channel_key = $1", channel_key
            )
            return None if text is None else rows.load_json_object(str(text))

        return await self._call(body)

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> None:
            await connection.execute(
                "INSERT INTO channel_config (channel_key, config, updated_by, updated_at) "
                "VALUES ($1, $2::jsonb, $3, $4) ON CONFLICT (channel_key) DO UPDATE SET "
                "config = EXCLUDED.config, updated_by = EXCLUDED.updated_by, "
                "updated_at = EXCLUDED.updated_at",
                channel_key,
                config_json,
                by,
                now,
            )

        await self._call(body)

    # --- a channel's memory and scheduled work (`postgres_memory`, `postgres_schedules`) --

    async def memory_notes(self, channel_key: str) -> list[MemoryNote]:
        return await self._call(lambda connection: memory.notes(connection, channel_key))

    async def add_memory_note(
        self, channel_key: str, text: str, *, by: str | None, max_notes: int, max_chars: int
    ) -> MemoryNote:
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> MemoryNote:
            return await memory.add_note(
                connection, channel_key, text, by, max_notes, max_chars, now
            )

        return await self._call(body, transaction=True)

    async def forget_memory_note(self, channel_key: str, note_id: int) -> bool:
        return await self._call(
            lambda connection: memory.forget_note(connection, channel_key, note_id)
        )

    async def clear_memory(self, channel_key: str) -> int:
        return await self._call(lambda connection: memory.clear(connection, channel_key))

    async def add_schedule(
        self,
        channel_key: str,
        *,
        prompt: str,
        cron: str | None,
        timezone: str,
        next_run_at: float,
        by_id: str,
        by_name: str,
        max_active: int,
    ) -> Schedule:
        now = self._clock()

        async def body(connection: asyncpg.Connection) -> Schedule:
            return await scheduling.add_schedule(
                connection,
                channel_key,
                prompt,
                cron,
                timezone,
                next_run_at,
                by_id,
                by_name,
                max_active,
                now,
            )

        return await self._call(body, transaction=True)

    async def schedules(self, channel_key: str) -> list[Schedule]:
        return await self._call(lambda connection: scheduling.schedules(connection, channel_key))

    async def cancel_schedule(self, channel_key: str, schedule_id: int) -> bool:
        return await self._call(
            lambda connection: scheduling.cancel(connection, channel_key, schedule_id)
        )

    async def due_schedules(self, now: float, *, limit: int) -> list[Schedule]:
        return await self._call(lambda connection: scheduling.due(connection, now, limit))

    async def claim_schedule(
        self, schedule_id: int, *, due_at: float, next_run_at: float | None, now: float
    ) -> Schedule | None:
        return await self._call(
            lambda connection: scheduling.claim(connection, schedule_id, due_at, next_run_at, now)
        )

    async def unsettled_schedule_runs(self, claimed_before: float, *, limit: int) -> list[Schedule]:
        return await self._call(
            lambda connection: scheduling.unsettled(connection, claimed_before, limit)
        )

    async def reclaim_schedule_run(
        self, schedule_id: int, *, due_at: float, since: float, now: float
    ) -> Schedule | None:
        return await self._call(
            lambda connection: scheduling.reclaim(connection, schedule_id, due_at, since, now)
        )

    async def settle_schedule_run(self, schedule_id: int, *, due_at: float) -> bool:
        return await self._call(
            lambda connection: scheduling.settle(connection, schedule_id, due_at)
        )

    async def now(self) -> float:
        return await self._call(scheduling.database_time)

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


async def _claim(connection: asyncpg.Connection, delivery_id: str, now: float) -> bool:
    # A concurrent claimer of the same id waits for this transaction, then sees the conflict.
    claimed = await connection.fetchval(
        "INSERT INTO deliveries (id, claimed_at) VALUES ($1, $2) ON CONFLICT DO NOTHING "
        "RETURNING true",
        delivery_id,
        now,
    )
    return claimed is not None


async def _record_usage(
    connection: asyncpg.Connection, run_id: int, usage: Usage, model: str | None, now: float
) -> None:
    added = await connection.fetchval(
        "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at, "
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        "SELECT id, conversation_id, user_id, channel_key, COALESCE($1, model), $2, $3, $4, $5, "
        "$6, $7 FROM runs WHERE id = $8 RETURNING true",
        model,
        now,
        usage.input,
        usage.output,
        usage.cache_read,
        usage.cache_write,
        usage.cost,
        run_id,
    )
    if added is None:
        raise KeyError(f"no run with id {run_id}")


def _settled(inflight: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that gave up is not told twice

    return done


if TYPE_CHECKING:

    def _implements_the_contract(store: PostgresStore) -> ConversationStore:
        return store

    def _coordinates_instances(store: PostgresStore) -> InstanceCoordination:
        return store


class _Opening:
    """What `PostgresStore.open()` returns: await it for a store, or `async with` it."""

    def __init__(self, opening: Awaitable[PostgresStore]) -> None:
        self._opening = opening
        self._store: PostgresStore | None = None

    def __await__(self) -> Generator[Any, None, PostgresStore]:
        return self._opening.__await__()

    async def __aenter__(self) -> PostgresStore:
        self._store = await self._opening
        return self._store

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._store is not None:
            await self._store.close()
