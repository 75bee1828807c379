"""The SQLite backend of `ConversationStore`, on aiosqlite.

Owns: the store (`SqliteStore`): the contract's methods, each handing its call to the module
that owns its SQL (each call a `storage.batching.Op`): `sqlite_conversations` (conversations,
messages, compactions), `sqlite_inbox` (deliveries and the inbox), `sqlite_runs`,
`sqlite_usage` (the ledger and feedback), `sqlite_channel_config`, `sqlite_memory`,
`sqlite_schedules`. Its connections, opening a file and how calls reach the driver are its
base, `sqlite_connections.SqliteConnections`; when calls run alone and when together is
`storage.batching`; rows to records is `storage.rows` (shared with PostgreSQL). Run traces,
search and the console's conversation and feedback reads are its base
`sqlite_console_conversations.SqliteConsoleConversations` (SQL: `sqlite_traces`).

How it stays correct and fast (docs/architecture.md, "Storage"):
- Two connections on one file (WAL): a writer, and a reader. Each has a batcher: a call made
  while nothing else runs goes to the driver at once (one autocommit statement for most
  writes: an append, a claim, an accept, a delivery, a finish); calls made meanwhile run
  together as one transaction (writes) or one round trip (reads) of a fixed number of
  statements. A write returns once committed; a read sees what was committed before it ran.
  (An in-memory database has one connection: its reads queue with the writes.)
- WAL with `synchronous=NORMAL`: once a method returns, its data survives the *process*
  dying at any moment (SIGKILL, OOM): the bytes are in the OS page cache and the WAL is
  replayed on the next open. Only an OS crash or power loss can lose the last few commits
  (never corrupt the file). Use `synchronous=FULL` where that matters.
- A call runs whole or not at all, even if its caller is cancelled midway: batches run in
  the batcher's own task, and a call alone is handed to the driver in one piece.
- `close()` finishes every call already made first; a store that is garbage collected
  unclosed stops its driver threads too. If a driver thread dies, its calls fail with a
  storage error within a second instead of hanging, and the store logs it (`sqlite_watchdog`).

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core.messages import Message, Usage, dump_message
from storage import rows
from storage import sqlite_channel_config as channel_config
from storage import sqlite_conversations as conversations
from storage import sqlite_inbox as inbox
from storage import sqlite_memory as memory
from storage import sqlite_runs as runs
from storage import sqlite_schedules as scheduling
from storage import sqlite_usage as usage_ledger
from storage.accepted import AcceptedMessages
from storage.audit_log import SqliteAuditLog
from storage.base import ConversationStore
from storage.records import (
    Accepted,
    Compaction,
    Conversation,
    FeedbackTally,
    Fence,
    InboxItem,
    LoadedConversation,
    MemoryNote,
    RunOutcome,
    RunRecord,
    Schedule,
    StoredMessage,
    UsageSummary,
    Vote,
)
from storage.sqlite_approvals import SqliteApprovals
from storage.sqlite_connections import Clock
from storage.sqlite_console import SqliteConsole
from storage.sqlite_console_conversations import SqliteConsoleConversations
from storage.sqlite_ops import Db


class SqliteStore(SqliteApprovals, SqliteConsoleConversations, SqliteAuditLog, SqliteConsole):
    """Persisted conversations in one SQLite file, on aiosqlite. Open with `open(path)`:

        async with SqliteStore.open("teammate.db") as store: ...
        store = await SqliteStore.open("teammate.db")  # then: await store.close()

    Methods given an unknown conversation or run id raise `KeyError`.
    """

    def __init__(self, writer: Db, reader: Db | None, path: str, clock: Clock) -> None:
        # Use `open()`: it checks the file, sets the pragmas, migrates and connects.
        super().__init__(writer, reader, path, clock)
        # What this process accepted and has not yet delivered: `deliver` hands it back.
        self._accepted = AcceptedMessages()
        self._requests = itertools.count(1)

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        return await self._write(
            conversations.GET_OR_CREATE, (key, channel_key, title, self._clock())
        )

    async def get_conversation(self, key: str) -> Conversation | None:
        return await self._read(lambda db: conversations.read_conversation(db, key))

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""
        return await self._read(
            lambda db: conversations.read_channel_conversations(db, channel_key, limit)
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
        return await self._write(
            conversations.UPDATE_CONVERSATION,
            (title, settings_json, self._clock(), conversation_id),
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
        fence: Fence | None = None,  # one process: nobody to fence out (storage.base)
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns.

        With `usage` (a model reply's, needing `run_id`): its ledger entry is recorded in the
        same transaction, as `record_usage` would (nothing for a reply that used no tokens).
        """
        if usage is not None and run_id is None:
            raise ValueError("usage is recorded against a run: give run_id")
        charge = usage if usage is not None and usage.total_tokens > 0 else None
        call = conversations.AppendCall(
            conversation_id,
            message,
            dump_message(message).decode(),
            run_id,
            charge,
            model,
            self._clock(),
        )
        return await self._write(
            conversations.APPEND if charge is None else conversations.APPEND_CHARGED, call
        )

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after that compaction."""
        return await self._read_op(conversations.LOAD, conversation_id)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""
        return await self._read(
            lambda db: conversations.messages_after_seq(db, conversation_id, seq)
        )

    async def message_count(self, conversation_id: int) -> int:
        return await self._read(lambda db: conversations.read_message_count(db, conversation_id))

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat (durably)."""
        return await self._write(inbox.CLAIM, (delivery_id, self._clock()))

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many.

        Keep them at least as long as a platform retries (Slack: ~5 minutes).
        """
        return await self._write(inbox.PRUNE, self._clock() - older_than_s)

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
        transaction, so a cancel or crash either loses nothing or did nothing (a retry of the
        same delivery is then accepted). None for a repeated `delivery_id`, or when any id in
        `also_claim` (more names of the same delivery) was claimed before."""
        claims = list(
            dict.fromkeys([*([delivery_id] if delivery_id is not None else []), *also_claim])
        )
        call = inbox.AcceptCall(
            request=next(self._requests),
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
        accepted = await self._write(inbox.ACCEPT, call)
        if accepted is not None:  # committed: its id is final
            self._accepted.keep(accepted)
        return accepted

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""
        return await self._read(lambda db: inbox.read_pending(db, conversation_id))

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""
        return await self._read(inbox.read_pending_conversations)

    async def deliver(
        self,
        conversation_id: int,
        item_ids: Sequence[int],
        *,
        run_id: int | None = None,
        fence: Fence | None = None,
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one transaction; items already settled are skipped."""
        ids = list(item_ids)
        delivery = inbox.Delivery(conversation_id, ids, self._accepted.known(conversation_id, ids))
        one_known = len(ids) == 1 and len(delivery.known) == 1
        call = inbox.DeliverCall(delivery, run_id, self._clock())
        stored = await self._write(inbox.DELIVER_KNOWN_ONE if one_known else inbox.DELIVER, call)
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
        ids = list(item_ids)
        await self._write(inbox.DROP, (conversation_id, ids, reason, self._clock()))
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
        """Record a run as "running" (`channel_key`: the conversation's by default), and
        deliver `deliver` to it in the same transaction, as `deliver` would (an unknown item:
        `KeyError`, and no run is recorded)."""
        ids = list(deliver)
        call = runs.StartRunCall(
            conversation_id=conversation_id,
            user_id=user_id,
            channel_key=channel_key,
            model=model,
            surface_json=rows.dump_json(surface_ref or {}),
            owner_json=rows.dump_json(owner or {}),
            delivery=inbox.Delivery(
                conversation_id, ids, self._accepted.known(conversation_id, ids)
            ),
            now=self._clock(),
            request=next(self._requests),
        )
        op = runs.START_RUN_DELIVERING_ONE if len(ids) == 1 else runs.START_RUN_DELIVERING
        record = await self._write(op if ids else runs.START_RUN, call)
        self._accepted.forget(ids)
        return record

    async def finish_run(
        self,
        run_id: int,
        outcome: RunOutcome,
        *,
        error: str | None = None,
        fence: Fence | None = None,
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger. The first finish
        wins: a finished run is returned as it was (a late "done" cannot overwrite "aborted")."""
        if outcome == "running" or outcome not in rows.OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")
        return await self._write(runs.FINISH_RUN, (run_id, outcome, error, self._clock()))

    async def set_run_surface_ref(
        self, run_id: int, ref: dict[str, Any], *, fence: Fence | None = None
    ) -> RunRecord:
        """Replace where a run is shown (e.g. the message ts a surface learned on its first
        post), so that recovery after a restart can edit that message."""
        return await self._write(runs.SURFACE_REF, (rows.dump_json(ref), run_id))

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: at start-up, the ones a crash interrupted."""
        return await self._read(runs.read_running_runs)

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
        call = conversations.CompactionCall(
            conversation_id, summary, up_to_seq, rows.dump_json(details or {}), self._clock()
        )
        return await self._write(conversations.COMPACTION, call)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        await self._write(
            usage_ledger.RECORD_USAGE, usage_ledger.UsageCall(run_id, usage, model, self._clock())
        )

    async def usage_since(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> Usage:
        """Total usage recorded at or after `since` (a timestamp), narrowed by every filter
        given: e.g. `usage_since(midnight, channel_key=...)` is what a channel spent today."""
        return await self._read(
            lambda db: usage_ledger.read_usage_since(
                db, since, conversation_id, user_id, channel_key
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
        given (a vote is in scope when its run is), read in one statement (one snapshot)."""
        return await self._read(
            lambda db: usage_ledger.read_usage_summary(
                db, since, conversation_id, user_id, channel_key
            )
        )

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(
        self, run_id: int, user_id: str, vote: Vote | None, *, channel_key: str | None = None
    ) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        return await self._write(
            usage_ledger.FEEDBACK, (run_id, user_id, vote, self._clock(), channel_key)
        )

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""
        return await self._read_op(channel_config.CHANNEL_CONFIG_READ, channel_key)

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        await self._write(
            channel_config.CHANNEL_CONFIG, (channel_key, config_json, by, self._clock())
        )

    # --- a channel's memory and scheduled work (`sqlite_memory`, `sqlite_schedules`) ------

    async def memory_notes(self, channel_key: str) -> list[MemoryNote]:
        return await self._read(lambda db: memory.read_notes(db, channel_key))

    async def add_memory_note(
        self, channel_key: str, text: str, *, by: str | None, max_notes: int, max_chars: int
    ) -> MemoryNote:
        call = (channel_key, text, by, max_notes, max_chars, self._clock())
        return await self._write(memory.ADD_NOTE, call)

    async def forget_memory_note(self, channel_key: str, note_id: int) -> bool:
        return await self._write(memory.FORGET_NOTE, (channel_key, note_id))

    async def clear_memory(self, channel_key: str) -> int:
        return await self._write(memory.CLEAR_MEMORY, channel_key)

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
        call = (
            channel_key,
            prompt,
            cron,
            timezone,
            next_run_at,
            by_id,
            by_name,
            max_active,
            self._clock(),
        )
        return await self._write(scheduling.ADD_SCHEDULE, call)

    async def schedules(self, channel_key: str) -> list[Schedule]:
        return await self._read(lambda db: scheduling.read_schedules(db, channel_key))

    async def cancel_schedule(self, channel_key: str, schedule_id: int) -> bool:
        return await self._write(scheduling.CANCEL_SCHEDULE, (channel_key, schedule_id))

    async def due_schedules(self, now: float, *, limit: int) -> list[Schedule]:
        return await self._read(lambda db: scheduling.read_due(db, now, limit))

    async def claim_schedule(
        self, schedule_id: int, *, due_at: float, next_run_at: float | None, now: float
    ) -> Schedule | None:
        return await self._write(scheduling.CLAIM_SCHEDULE, (schedule_id, due_at, next_run_at, now))

    async def unsettled_schedule_runs(self, claimed_before: float, *, limit: int) -> list[Schedule]:
        return await self._read(lambda db: scheduling.read_unsettled(db, claimed_before, limit))

    async def reclaim_schedule_run(
        self, schedule_id: int, *, due_at: float, since: float, now: float
    ) -> Schedule | None:
        call = (schedule_id, due_at, since, now)
        return await self._write(scheduling.RECLAIM_SCHEDULE_RUN, call)

    async def settle_schedule_run(self, schedule_id: int, *, due_at: float) -> bool:
        return await self._write(scheduling.SETTLE_SCHEDULE_RUN, (schedule_id, due_at))

    async def now(self) -> float:
        return self._clock()  # every process of one SQLite file runs on its host


if TYPE_CHECKING:

    def _implements_the_contract(store: SqliteStore) -> ConversationStore:
        return store
