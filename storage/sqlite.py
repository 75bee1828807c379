"""The SQLite backend of `ConversationStore`, on the stdlib `sqlite3` and one thread per store.

Owns: the SQL behind every store method, the connection's pragmas, and opening a file (checks,
then migrations). The thread that runs the SQL and commits it in groups is `sqlite_thread`;
mapping rows to records, and the statements several methods share, is `sqlite_rows`.

How it stays correct and fast (docs/architecture.md, "Storage"; the thread's side is in
`sqlite_thread`):
- Each store method is ONE body run by the database thread: one transaction, whole or not at
  all, even if its caller is cancelled midway.
- WAL with `synchronous=NORMAL`: a commit appends to the WAL with `write()` before it returns,
  so once a method returns its data survives the *process* dying at any moment (SIGKILL,
  OOM): the bytes are in the OS page cache and the WAL is replayed on the next open. Only an
  OS crash or power loss can lose the last few commits (never corrupt the file); that trade
  buys appends without an fsync each. Use `synchronous=FULL` where that matters.
- Appending reads and bumps `conversations.last_seq` inside the same transaction: no
  `COUNT(*)`, no scan, so message 10,000 costs what message 10 does.
- `close()` queues a stop behind everything already queued, so pending calls finish first;
  a store that is garbage collected unclosed stops its thread too.

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from core.messages import Message, Usage, dump_message
from storage import sqlite_rows as rows
from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    ConversationStore,
    FeedbackTally,
    InboxItem,
    LoadedConversation,
    RunOutcome,
    RunRecord,
    SchemaError,
    StoredMessage,
    UsageSummary,
    Vote,
)
from storage.migrations import (
    MIGRATIONS,
    Migration,
    inspect,
    integrity_problems,
    migrate,
    refuse_damaged,
)
from storage.sqlite_thread import Body, DbThread, nothing

T = TypeVar("T")
Clock = Callable[[], float]

# How many accepted, not yet delivered messages a store keeps in memory (see `_accepted`).
_ACCEPTED_KEPT = 4096


class SqliteStore:
    """Persisted conversations in one SQLite file. Open with `SqliteStore.open(path)`:

        async with SqliteStore.open("teammate.db") as store: ...
        store = await SqliteStore.open("teammate.db")  # then: await store.close()

    Methods given an unknown conversation or run id raise `KeyError`.
    """

    def __init__(self, db: DbThread, path: str, clock: Clock) -> None:
        # Use `open()`: it starts the thread, checks the file, sets the pragmas and migrates.
        self._db = db
        self._path = path
        self._clock = clock
        self._closed = False
        # Messages this process accepted and has not yet delivered or dropped, by inbox item id
        # (with their conversation): `deliver` hands back the very object accepted instead of
        # parsing it again on the database thread, where parsing holds the GIL. Bounded; a miss
        # (a restart, a cancelled caller, eviction) just parses the stored body.
        self._accepted: dict[int, tuple[int, Message]] = {}
        # Unclosed and forgotten: stop the thread (it closes the connection) instead of leaking.
        self._finalizer = weakref.finalize(self, db.stop)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        clock: Clock = time.time,
        busy_timeout_s: float = 10.0,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> _Opening:
        """Open (creating or upgrading) the database at `path`; await it or `async with` it.

        Raises `SchemaError` for a file that is not a Teammate database or was written by a
        newer Teammate, and `DatabaseDamaged` (a `SchemaError`) for one with damaged pages;
        such a file is left untouched. `":memory:"` gives a private,
        non-durable database (for tests and demos).
        """
        return _Opening(cls._open(str(path), clock, busy_timeout_s, migrations))

    @classmethod
    async def _open(
        cls, path: str, clock: Clock, busy_timeout_s: float, migrations: Sequence[Migration]
    ) -> SqliteStore:
        def setup(db: sqlite3.Connection) -> None:
            # Connection settings only; nothing is written before the file is recognised.
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000):d}")
            db.execute("PRAGMA foreign_keys = ON")
            inspect(db, path, migrations)
            refuse_damaged(db, path)
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
            if path != ":memory:" and str(mode).lower() != "wal":
                raise SchemaError(f"{path}: could not switch to WAL mode (got {mode!r})")
            db.execute("PRAGMA synchronous = NORMAL")
            migrate(db, path, migrations)

        db = DbThread(path, busy_timeout_s)
        try:
            await db.submit("setup", setup)
        except BaseException:
            db.stop()  # after the setup (even a cancelled caller's): closes the connection
            raise
        return cls(db, path, clock)

    async def integrity_check(self) -> list[str]:
        """Everything SQLite finds wrong with the file, indexes and foreign keys included
        (`[]`: healthy). Reads the whole file on the store's thread: for `teammate doctor`,
        not for a busy bot."""

        def body(db: sqlite3.Connection) -> list[str]:
            return integrity_problems(db, full=True)

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
        """Finish every call already made, then close the connection and stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        await self._db.submit("stop", nothing)
        self._db.join()

    async def __aenter__(self) -> SqliteStore:
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

    # --- transactions ---------------------------------------------------------------------

    def _read(self, body: Body[T]) -> asyncio.Future[T]:
        """Run `body` in a read transaction (a consistent snapshot) on the store's thread."""
        if self._closed:
            raise RuntimeError(f"the store for {self._path} is closed")
        return self._db.submit("read", body)

    def _write(self, body: Body[T]) -> asyncio.Future[T]:
        """Run `body` as one atomic write, committed before the future resolves."""
        if self._closed:
            raise RuntimeError(f"the store for {self._path} is closed")
        return self._db.submit("write", body)

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        now = self._clock()

        def body(db: sqlite3.Connection) -> Conversation:
            db.execute(
                "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                (key, channel_key, title, now, now),
            )
            found = rows.conversation_by(db, "key", key)
            assert found is not None
            return found

        return await self._write(body)

    async def get_conversation(self, key: str) -> Conversation | None:
        def body(db: sqlite3.Connection) -> Conversation | None:
            return rows.conversation_by(db, "key", key)

        return await self._read(body)

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""

        def body(db: sqlite3.Connection) -> list[Conversation]:
            found = db.execute(
                f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE channel_key = ? "
                "ORDER BY id DESC LIMIT ?",
                (channel_key, max(0, limit)),
            ).fetchall()
            return [rows.conversation_from(row) for row in found]

        return await self._read(body)

    async def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> Conversation:
        """Set the title and/or replace the settings; `None` leaves a field as it is."""
        params = (
            title,
            None if settings is None else rows.dump_json(settings),
            self._clock(),
            conversation_id,
        )

        def body(db: sqlite3.Connection) -> Conversation:
            db.execute(
                "UPDATE conversations SET title = COALESCE(?, title), "
                "settings = COALESCE(?, settings), updated_at = ? WHERE id = ?",
                params,
            )
            found = rows.conversation_by(db, "id", conversation_id)
            if found is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return found

        return await self._write(body)

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

        With `usage` (a model reply's, needing `run_id`): its ledger entry is recorded in the
        same transaction, as `record_usage` would (nothing for a reply that used no tokens).
        """
        if usage is not None and run_id is None:
            raise ValueError("usage is recorded against a run: give run_id")
        body_json = dump_message(message).decode()
        now = self._clock()
        charge = usage is not None and usage.total_tokens > 0

        def body(db: sqlite3.Connection) -> StoredMessage:
            if charge:  # first: an unknown run is a KeyError, as from record_usage
                assert usage is not None and run_id is not None
                rows.record_usage(db, run_id, usage, model, now)
            seq = rows.append_message(db, conversation_id, message, body_json, run_id, now)
            return StoredMessage(seq=seq, message=message)

        return await self._write(body)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after that compaction."""

        def body(db: sqlite3.Connection) -> LoadedConversation:
            conversation = rows.conversation_by(db, "id", conversation_id)
            if conversation is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            compaction = rows.latest_compaction(db, conversation_id)
            after = compaction.up_to_seq if compaction else 0
            messages = rows.messages_after(db, conversation_id, after)
            return LoadedConversation(conversation, compaction, messages)

        return await self._read(body)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""

        def body(db: sqlite3.Connection) -> list[StoredMessage]:
            return rows.messages_after(db, conversation_id, seq)

        return await self._read(body)

    async def message_count(self, conversation_id: int) -> int:
        def body(db: sqlite3.Connection) -> int:
            row = rows.conversation_row(db, conversation_id, "last_seq")
            return int(row[0])

        return await self._read(body)

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat (durably)."""
        params = (delivery_id, self._clock())

        def body(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "INSERT OR IGNORE INTO deliveries (id, claimed_at) VALUES (?, ?)", params
            )
            return cursor.rowcount == 1

        return await self._write(body)

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many.

        Keep them at least as long as a platform retries (Slack: ~5 minutes).
        """
        cutoff = self._clock() - older_than_s

        def body(db: sqlite3.Connection) -> int:
            return db.execute("DELETE FROM deliveries WHERE claimed_at < ?", (cutoff,)).rowcount

        return await self._write(body)

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
        now = self._clock()
        claims = list(
            dict.fromkeys([*([delivery_id] if delivery_id is not None else []), *also_claim])
        )
        body_json = dump_message(message).decode()
        ref_json = rows.dump_json(surface_ref or {})
        backfill_json = [(earlier, dump_message(earlier).decode()) for earlier in backfill]

        def body(db: sqlite3.Connection) -> Accepted | None:
            if claims and not rows.claim_all(db, claims, now):
                return None
            db.execute(
                "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                (conversation_key, channel_key, title, now, now),
            )
            # New means nothing was ever said here: no history and nothing accepted before.
            row = db.execute(
                f"SELECT {rows.CONVERSATION_COLUMNS}, last_seq = 0 AND NOT EXISTS "
                "(SELECT 1 FROM inbox WHERE inbox.conversation_id = conversations.id) "
                "FROM conversations WHERE key = ?",
                (conversation_key,),
            ).fetchone()
            conversation, created = rows.conversation_from(row), bool(row[-1])
            if created:
                for earlier, earlier_json in backfill_json:
                    rows.append_message(db, conversation.id, earlier, earlier_json, None, now)
            cursor = db.execute(
                "INSERT INTO inbox (conversation_id, delivery_id, body, surface_ref, received_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (conversation.id, delivery_id, body_json, ref_json, now),
            )
            assert cursor.lastrowid is not None
            item = InboxItem(
                id=cursor.lastrowid,
                conversation_id=conversation.id,
                message=message,
                surface_ref=json.loads(ref_json),
                received_at=now,
            )
            return Accepted(conversation=conversation, item=item, created=created)

        accepted = await self._write(body)
        if accepted is not None:  # committed: its id is final
            if len(self._accepted) >= _ACCEPTED_KEPT:
                del self._accepted[next(iter(self._accepted))]
            self._accepted[accepted.item.id] = (accepted.conversation.id, message)
        return accepted

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""

        def body(db: sqlite3.Connection) -> list[InboxItem]:
            rows.conversation_row(db, conversation_id, "id")
            found = db.execute(
                "SELECT id, body, surface_ref, received_at FROM inbox "
                "WHERE conversation_id = ? AND state = 'pending' ORDER BY id",
                (conversation_id,),
            ).fetchall()
            return [rows.inbox_item(conversation_id, row) for row in found]

        return await self._read(body)

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""

        def body(db: sqlite3.Connection) -> list[int]:
            found = db.execute(
                "SELECT conversation_id FROM inbox WHERE state = 'pending' "
                "GROUP BY conversation_id ORDER BY MIN(id)"
            ).fetchall()
            return [int(row[0]) for row in found]

        return await self._read(body)

    async def deliver(
        self, conversation_id: int, item_ids: Sequence[int], *, run_id: int | None = None
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one transaction; items already settled are skipped."""
        ids = list(item_ids)
        now = self._clock()
        known = self._known(conversation_id, ids)

        def body(db: sqlite3.Connection) -> list[StoredMessage]:
            return rows.deliver_items(db, conversation_id, ids, known, run_id, now)

        stored = await self._write(body)
        self._forget(ids)
        return stored

    async def drop(self, conversation_id: int, item_ids: Sequence[int], reason: str) -> None:
        """Mark pending items as not to be answered; they never enter history."""
        ids = list(item_ids)
        now = self._clock()

        def body(db: sqlite3.Connection) -> None:
            rows.inbox_rows(db, conversation_id, ids)
            db.executemany(
                "UPDATE inbox SET state = 'dropped', settled_at = ?, reason = ? "
                "WHERE id = ? AND state = 'pending'",
                [(now, reason, item_id) for item_id in ids],
            )

        await self._write(body)
        self._forget(ids)

    def _known(self, conversation_id: int, item_ids: list[int]) -> dict[int, Message]:
        """The accepted messages this store still holds for `item_ids`."""
        return {
            item_id: entry[1]
            for item_id in item_ids
            if (entry := self._accepted.get(item_id)) is not None and entry[0] == conversation_id
        }

    def _forget(self, item_ids: list[int]) -> None:
        """Settled items (delivered or dropped, now or before) need no kept message."""
        for item_id in item_ids:
            self._accepted.pop(item_id, None)

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
        """Record a run as "running". `channel_key` defaults to the conversation's.

        `deliver`: inbox items to deliver to the new run in the same transaction, exactly as
        `deliver(conversation_id, items, run_id=<the new run>)` would (same order, same
        errors: an unknown item raises `KeyError` and no run is recorded).
        """
        now = self._clock()
        surface_json = rows.dump_json(surface_ref or {})
        owner_json = rows.dump_json(owner or {})
        ids = list(deliver)
        known = self._known(conversation_id, ids)

        def body(db: sqlite3.Connection) -> RunRecord:
            found = rows.conversation_row(db, conversation_id, "key, channel_key")
            run_channel = found[1] if channel_key is None else channel_key
            cursor = db.execute(
                "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, "
                "model, surface_ref, owner) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)",
                (conversation_id, now, user_id, run_channel, model, surface_json, owner_json),
            )
            assert cursor.lastrowid is not None
            if ids:
                rows.deliver_items(db, conversation_id, ids, known, cursor.lastrowid, now)
            # A new run has no ledger entries yet: its usage is zero without asking.
            return RunRecord(
                id=cursor.lastrowid,
                conversation_id=conversation_id,
                conversation_key=str(found[0]),
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

        record = await self._write(body)
        self._forget(ids)
        return record

    async def finish_run(
        self, run_id: int, outcome: RunOutcome, *, error: str | None = None
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger.

        The first finish wins: finishing a run that is already finished changes nothing and
        returns it as it was (a late "done" cannot overwrite "aborted").
        """
        if outcome == "running" or outcome not in rows.OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")
        params = (outcome, error, self._clock(), run_id, run_id)

        def body(db: sqlite3.Connection) -> RunRecord:
            db.execute(
                "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
                "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
                f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = ?) "
                "WHERE id = ? AND outcome = 'running'",
                params,
            )
            return rows.run_by_id(db, run_id)

        return await self._write(body)

    async def set_run_surface_ref(self, run_id: int, ref: dict[str, Any]) -> RunRecord:
        """Replace where a run is shown (e.g. the message ts a surface learned on its first
        post), so that recovery after a restart can edit that message."""
        ref_json = rows.dump_json(ref)

        def body(db: sqlite3.Connection) -> RunRecord:
            db.execute("UPDATE runs SET surface_ref = ? WHERE id = ?", (ref_json, run_id))
            return rows.run_by_id(db, run_id)

        return await self._write(body)

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: at start-up, the ones a crash interrupted."""

        def body(db: sqlite3.Connection) -> list[RunRecord]:
            found = db.execute(
                "SELECT id FROM runs WHERE outcome = 'running' ORDER BY started_at, id"
            ).fetchall()
            return [rows.run_by_id(db, int(row[0])) for row in found]

        return await self._read(body)

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

        def body(db: sqlite3.Connection) -> Compaction:
            row = rows.conversation_row(db, conversation_id, "last_seq")
            last_seq = int(row[0])
            if not 0 < up_to_seq <= last_seq:
                raise ValueError(
                    f"up_to_seq {up_to_seq} is outside the conversation's messages 1..{last_seq}"
                )
            cursor = db.execute(
                "INSERT INTO compactions (conversation_id, summary, up_to_seq, details, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, summary, up_to_seq, details_json, now),
            )
            assert cursor.lastrowid is not None
            return Compaction(
                id=cursor.lastrowid,
                conversation_id=conversation_id,
                summary=summary,
                up_to_seq=up_to_seq,
                created_at=now,
                details=json.loads(details_json),
            )

        return await self._write(body)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        now = self._clock()

        def body(db: sqlite3.Connection) -> None:
            rows.record_usage(db, run_id, usage, model, now)

        await self._write(body)

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
        where = ["at >= ?"]
        params: list[Any] = [since]
        for column, value in (
            ("conversation_id", conversation_id),
            ("user_id", user_id),
            ("channel_key", channel_key),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}"

        def body(db: sqlite3.Connection) -> Usage:
            return rows.usage_of(db.execute(sql, params).fetchone())

        return await self._read(body)

    async def usage_summary(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> UsageSummary:
        """Usage, runs started and votes cast at or after `since`, narrowed by every filter
        given (a vote is in scope when its run is), read in one snapshot."""
        filters = {
            "conversation_id": conversation_id,
            "user_id": user_id,
            "channel_key": channel_key,
        }
        given = {column: value for column, value in filters.items() if value is not None}
        params = [since, *given.values()]

        def scope(table: str) -> str:
            return "".join(f" AND {table}.{column} = ?" for column in given)

        ledger_sql = (
            f"SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE at >= ?{scope('usage_ledger')}"
        )
        runs_sql = f"SELECT COUNT(*) FROM runs WHERE started_at >= ?{scope('runs')}"
        votes_sql = (
            "SELECT COALESCE(SUM(f.vote = 'up'), 0), COALESCE(SUM(f.vote = 'down'), 0) "
            f"FROM run_feedback f JOIN runs ON runs.id = f.run_id WHERE f.at >= ?{scope('runs')}"
        )

        def body(db: sqlite3.Connection) -> UsageSummary:
            usage = rows.usage_of(db.execute(ledger_sql, params).fetchone())
            (runs,) = db.execute(runs_sql, params).fetchone()
            up, down = db.execute(votes_sql, params).fetchone()
            return UsageSummary(usage=usage, runs=int(runs), votes_up=int(up), votes_down=int(down))

        return await self._read(body)

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(self, run_id: int, user_id: str, vote: Vote | None) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        now = self._clock()

        def body(db: sqlite3.Connection) -> FeedbackTally:
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise KeyError(f"no run {run_id}")
            if vote is None:
                db.execute(
                    "DELETE FROM run_feedback WHERE run_id = ? AND user_id = ?", (run_id, user_id)
                )
            else:
                db.execute(
                    "INSERT INTO run_feedback (run_id, user_id, vote, at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (run_id, user_id) DO UPDATE SET vote = excluded.vote, "
                    "at = excluded.at",
                    (run_id, user_id, vote, now),
                )
            up, down = db.execute(
                "SELECT COALESCE(SUM(vote = 'up'), 0), COALESCE(SUM(vote = 'down'), 0) "
                "FROM run_feedback WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            return FeedbackTally(up=int(up), down=int(down))

        return await self._write(body)

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""

        def body(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(
                "SELECT config FROM channel_config WHERE channel_key = ?", (channel_key,)
            ).fetchone()
            return None if row is None else rows.load_json_object(row[0])

        return await self._read(body)

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        now = self._clock()

        def body(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO channel_config (channel_key, config, updated_by, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (channel_key) DO UPDATE SET "
                "config = excluded.config, updated_by = excluded.updated_by, "
                "updated_at = excluded.updated_at",
                (channel_key, config_json, by, now),
            )

        await self._write(body)


if TYPE_CHECKING:

    def _implements_the_contract(store: SqliteStore) -> ConversationStore:
        return store


class _Opening:
    """What `SqliteStore.open()` returns: await it for a store, or `async with` it."""

    def __init__(self, opening: Awaitable[SqliteStore]) -> None:
        self._opening = opening
        self._store: SqliteStore | None = None

    def __await__(self) -> Generator[Any, None, SqliteStore]:
        return self._opening.__await__()

    async def __aenter__(self) -> SqliteStore:
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
