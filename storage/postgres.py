"""The PostgreSQL backend of `ConversationStore`, on asyncpg: for several Teammate instances
on one database (docs/architecture.md, "Storage" and "Several instances").

Owns: `PostgresStore`: the contract's methods, each running its call on a pooled connection
through the module that owns its SQL: `postgres_conversations` (conversations, messages,
compactions; appends grouped by `postgres_batch`), `postgres_inbox` (deliveries and the
inbox), `postgres_runs`, `postgres_usage` (the ledger and feedback), `postgres_channel_config`,
`postgres_memory`, `postgres_schedules`; and `InstanceCoordination` (`postgres_instances`:
conversation leases and the notifications instances send each other). Its pool, opening a
database (checks, then migrations) and how calls run are its base,
`postgres_connections.PostgresConnections`. Mapping rows to records is `storage.rows` (shared
with SQLite); the statements several methods share are `postgres_statements`; the schema is
`postgres_migrations`.

How it stays correct and fast:
- Each store method is ONE transaction on one pooled connection, in as few round trips as
  the SQL allows: a single statement where one will do (an append is one `UPDATE ...
  RETURNING` feeding an `INSERT` through a CTE), arrays (`= ANY($1::bigint[])`, `unnest`)
  instead of a statement per item, `RETURNING` instead of reading back.
- Cross-instance races are settled by the database: a delivery id is a primary key (the
  second claimer waits for the first to commit, then sees the conflict), inbox items are
  locked (`FOR UPDATE`) before they are delivered, and a conversation's row is locked by
  every append, so seqs stay gap-free with any number of writers.
- A method runs whole or not at all even if its caller is cancelled, and `close()` waits
  for the calls already made (`postgres_connections`).

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core.messages import Message, Usage, dump_message
from storage import postgres_conversations as conversations
from storage import postgres_inbox as inbox
from storage import postgres_runs as runs
from storage import postgres_usage as usage_ledger
from storage import rows
from storage.accepted import AcceptedMessages
from storage.audit_log import PostgresAuditLog
from storage.base import ConversationStore, InstanceCoordination
from storage.dsn import redact_dsn
from storage.postgres_approvals import PostgresApprovals
from storage.postgres_batch import APPEND, AppendCall
from storage.postgres_connections import Clock
from storage.postgres_console import PostgresConsole
from storage.postgres_console_conversations import PostgresConsoleConversations
from storage.postgres_pool import Pool
from storage.records import (
    Accepted,
    Compaction,
    Conversation,
    Fence,
    InboxItem,
    LoadedConversation,
    RunOutcome,
    RunRecord,
    StoredMessage,
    UsageSummary,
)


def redact_url(url: str) -> str:
    """`url` without its secrets (for logs, errors and `teammate doctor`): storage.dsn."""
    return redact_dsn(url)


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).split(":", 1)[0] in ("postgresql", "postgres")


class PostgresStore(
    PostgresApprovals,
    PostgresConsoleConversations,
    PostgresAuditLog,
    PostgresConsole,
):
    """Persisted conversations in a PostgreSQL database, shared by any number of instances.

        async with PostgresStore.open("postgresql://teammate@db/teammate") as store: ...

    The tables live in the connection's current schema (`?search_path=...` in the URL picks
    another). Methods given an unknown conversation or run id raise `KeyError`.
    """

    def __init__(self, pool: Pool, url: str, clock: Clock, schema: str, lease_ttl_s: float) -> None:
        # Use `open()`: it creates the pool, checks the schema and migrates.
        super().__init__(pool, url, clock, schema, lease_ttl_s)
        # What this store accepted and has not yet delivered: `deliver` hands it back (a miss,
        # e.g. another instance accepted it, parses the stored body).
        self._accepted = AcceptedMessages()

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        now = self._clock()
        return await self._call(
            lambda connection: conversations.get_or_create(connection, key, channel_key, title, now)
        )

    async def get_conversation(self, key: str) -> Conversation | None:
        return await self._call(lambda connection: conversations.get(connection, key))

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""
        return await self._call(
            lambda connection: conversations.of_channel(connection, channel_key, limit)
        )

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
        return await self._call(
            lambda connection: conversations.update(
                connection, conversation_id, title, settings_json, now
            )
        )

    # --- messages -------------------------------------------------------------------------

    async def append_message(
        self,
        conversation_id: int,
        message: Message,
        *,
        run_id: int | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        fence: Fence | None = None,
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns.
        With `usage` (needing `run_id`): its ledger entry in the same statement (nothing for
        a reply that used no tokens)."""
        if usage is not None and run_id is None:
            raise ValueError("usage is recorded against a run: give run_id")
        body_json = dump_message(message).decode()
        charge = usage if usage is not None and usage.total_tokens > 0 else None
        now = self._clock()
        call = AppendCall(conversation_id, message, body_json, run_id, now, charge, model, fence)
        # Grouped with other appends while the database is busy (`postgres_batch`); an
        # unknown run is a KeyError (the message's foreign key), as from record_usage.
        if self._closed:
            raise RuntimeError(f"the store for {self.url} is closed")
        seq = await self._appends.submit(APPEND, call)  # runs whole if the caller goes
        return StoredMessage(seq=seq, message=message)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after it: ONE
        statement, so one snapshot."""
        return await self._call(lambda connection: conversations.load(connection, conversation_id))

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""
        return await self._call(
            lambda connection: conversations.messages_after(connection, conversation_id, seq)
        )

    async def message_count(self, conversation_id: int) -> int:
        return await self._call(
            lambda connection: conversations.message_count(connection, conversation_id)
        )

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed by any instance, False for every
        repeat (durably)."""
        now = self._clock()
        return await self._call(lambda connection: inbox.claim(connection, delivery_id, now))

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many."""
        cutoff = self._clock() - older_than_s
        return await self._call(lambda connection: inbox.prune(connection, cutoff))

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
        claims = list(
            dict.fromkeys([*([delivery_id] if delivery_id is not None else []), *also_claim])
        )
        call = inbox.AcceptCall(
            key=conversation_key,
            channel_key=channel_key,
            title=title,
            claims=claims,
            delivery_id=delivery_id,
            message=message,
            body_json=dump_message(message).decode(),
            ref_json=rows.dump_json(surface_ref or {}),
            backfill=[(earlier, dump_message(earlier).decode()) for earlier in backfill],
            now=self._clock(),
        )
        # A backfill is a second statement, so then (only) a transaction.
        try:
            accepted = await self._call(
                lambda connection: inbox.accept(connection, self._instances, call),
                transaction=bool(call.backfill),
            )
        except inbox.Repeated:
            return None  # a repeated delivery: the statement (or transaction) was undone
        self._accepted.keep(accepted)  # committed: its id is final
        return accepted

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""
        return await self._call(lambda connection: inbox.pending(connection, conversation_id))

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""
        return await self._call(inbox.pending_conversations)

    async def deliver(
        self,
        conversation_id: int,
        item_ids: Sequence[int],
        *,
        run_id: int | None = None,
        fence: Fence | None = None,
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one statement; items already settled are skipped."""
        ids = list(dict.fromkeys(item_ids))  # an id given twice is delivered once
        now = self._clock()
        known = self._accepted.known(conversation_id, ids)
        if not ids:
            return []
        stored = await self._call(
            lambda connection: inbox.deliver(
                connection, conversation_id, ids, now, run_id, known, fence
            )
        )
        self._accepted.forget(ids)
        return stored

    async def drop(
        self,
        conversation_id: int,
        item_ids: Sequence[int],
        reason: str,
        *,
        fence: Fence | None = None,
    ) -> None:
        """Mark pending items as not to be answered; they never enter history."""
        ids = list(dict.fromkeys(item_ids))
        now = self._clock()
        await self._call(
            lambda connection: inbox.drop(connection, conversation_id, ids, reason, now, fence)
        )
        self._accepted.forget(ids)

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
        fence: Fence | None = None,
    ) -> RunRecord:
        """Record a run as "running" (`channel_key` defaults to the conversation's), and
        deliver `deliver` to it in the same transaction (an unknown item: `KeyError`, no run)."""
        ids = list(dict.fromkeys(deliver))
        call = runs.StartRunCall(
            conversation_id=conversation_id,
            user_id=user_id,
            channel_key=channel_key,
            model=model,
            surface_json=rows.dump_json(surface_ref or {}),
            owner_json=rows.dump_json(owner or {}),
            deliver=ids,
            known=self._accepted.known(conversation_id, ids),
            now=self._clock(),
            fence=fence,
        )
        started = await self._call(lambda connection: runs.start(connection, call))
        self._accepted.forget(ids)
        return started

    async def finish_run(
        self,
        run_id: int,
        outcome: RunOutcome,
        *,
        error: str | None = None,
        fence: Fence | None = None,
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger. The first finish
        wins: a finished run is returned as it was."""
        if outcome == "running" or outcome not in rows.OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")
        now = self._clock()
        return await self._call(
            lambda connection: runs.finish(connection, run_id, outcome, error, now, fence)
        )

    async def set_run_surface_ref(
        self, run_id: int, ref: dict[str, Any], *, fence: Fence | None = None
    ) -> RunRecord:
        """Replace where a run is shown, so that recovery after a restart can edit it."""
        ref_json = rows.dump_json(ref)
        return await self._call(
            lambda connection: runs.set_surface_ref(connection, run_id, ref_json, fence)
        )

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: the ones a crash may have interrupted."""
        return await self._call(runs.running)

    # --- compactions ----------------------------------------------------------------------

    async def add_compaction(
        self,
        conversation_id: int,
        summary: str,
        up_to_seq: int,
        details: dict[str, Any] | None = None,
        *,
        fence: Fence | None = None,
    ) -> Compaction:
        """Store `summary` as standing in for messages 1..`up_to_seq` (which must exist)."""
        now = self._clock()
        details_json = rows.dump_json(details or {})
        return await self._call(
            lambda connection: conversations.add_compaction(
                connection, conversation_id, summary, up_to_seq, details_json, now, fence
            )
        )

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        now = self._clock()
        await self._call(
            lambda connection: usage_ledger.record(connection, run_id, usage, model, now)
        )

    async def usage_since(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> Usage:
        """Total usage recorded at or after `since`, narrowed by every filter given."""
        return await self._call(
            lambda connection: usage_ledger.since(
                connection, since, conversation_id, user_id, channel_key
            )
        )

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
        return await self._call(
            lambda connection: usage_ledger.summary(
                connection, since, conversation_id, user_id, channel_key
            )
        )


if TYPE_CHECKING:

    def _implements_the_contract(store: PostgresStore) -> ConversationStore:
        return store

    def _coordinates_instances(store: PostgresStore) -> InstanceCoordination:
        return store
