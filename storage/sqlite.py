"""The SQLite backend of `ConversationStore`, on aiosqlite.

Owns: the store (`SqliteStore`): its two connections, their pragmas, opening a file (checks,
then migrations), and the SQL of its simple reads. The SQL of every write (and of the reads
the runner makes many at once) is `sqlite_ops`; when calls run alone and when together is
`storage.batching`; rows to records is `storage.rows` (shared with PostgreSQL).

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

import asyncio
import itertools
import sqlite3
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from core.messages import Message, Usage, dump_message
from storage import rows
from storage import sqlite_memory as memory
from storage import sqlite_schedules as scheduling
from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    ConversationStore,
    FeedbackTally,
    InboxItem,
    LoadedConversation,
    MemoryNote,
    RunOutcome,
    RunRecord,
    Schedule,
    SchemaError,
    StoredMessage,
    UsageSummary,
    Vote,
)
from storage.batching import Batcher, Op
from storage.sqlite_migrations import (
    MIGRATIONS,
    Migration,
    inspect,
    integrity_problems,
    migrate,
    refuse_damaged,
)
from storage.sqlite_ops import (
    ACCEPT,
    ACCEPT_SETUP,
    APPEND,
    APPEND_CHARGED,
    CHANNEL_CONFIG,
    CHANNEL_CONFIG_READ,
    CLAIM,
    COMPACTION,
    DELIVER,
    DELIVER_KNOWN_ONE,
    DELIVER_TRIGGER,
    DROP,
    FEEDBACK,
    FINISH_RUN,
    GET_OR_CREATE,
    LAST_SEQ_TRIGGER,
    LOAD,
    PRUNE,
    READ,
    RECORD_USAGE,
    RUN_FIELDS,
    START_RUN,
    START_RUN_DELIVERING,
    START_RUN_DELIVERING_ONE,
    START_SETUP,
    SURFACE_REF,
    UPDATE_CONVERSATION,
    AcceptCall,
    AppendCall,
    CompactionCall,
    Db,
    DeliverCall,
    Delivery,
    NoTransactions,
    SqliteTransactions,
    StartRunCall,
    UsageCall,
    fetchall,
    fetchone,
    messages_after_seq,
)
from storage.sqlite_watchdog import Drivers, connect

T = TypeVar("T")
Clock = Callable[[], float]

# How many accepted, not yet delivered messages a store keeps in memory (see `_accepted`).
_ACCEPTED_KEPT = 4096


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


class SqliteStore:
    """Persisted conversations in one SQLite file, on aiosqlite. Open with `open(path)`:

        async with SqliteStore.open("teammate.db") as store: ...
        store = await SqliteStore.open("teammate.db")  # then: await store.close()

    Methods given an unknown conversation or run id raise `KeyError`.
    """

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
        # Messages this process accepted and has not yet delivered or dropped, by inbox item id
        # (with their conversation): `deliver` hands back the very object accepted instead of
        # parsing it again. Bounded; a miss (a restart, eviction) parses the stored body.
        self._accepted: dict[int, tuple[int, Message]] = {}
        self._requests = itertools.count(1)
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
    ) -> _Opening:
        """Open (creating or upgrading) the database at `path`; await it or `async with` it.

        Raises `SchemaError` for a file that is not a Teammate database or was written by a
        newer Teammate, and `DatabaseDamaged` (a `SchemaError`) for one with damaged pages;
        such a file is left untouched. `":memory:"` gives a private, non-durable database.
        """
        return _Opening(cls._open(str(path), clock, busy_timeout_s, migrations))

    @classmethod
    async def _open(
        cls, path: str, clock: Clock, busy_timeout_s: float, migrations: Sequence[Migration]
    ) -> SqliteStore:
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

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        return await self._write(GET_OR_CREATE, (key, channel_key, title, self._clock()))

    async def get_conversation(self, key: str) -> Conversation | None:
        async def body(db: Db) -> Conversation | None:
            row = await fetchone(
                db, f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = ?", (key,)
            )
            return None if row is None else rows.conversation_from(row)

        return await self._read(body)

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""

        async def body(db: Db) -> list[Conversation]:
            found = await fetchall(
                db,
                f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE channel_key = ? "
                "ORDER BY id DESC LIMIT ?",
                (channel_key, max(0, limit)),
            )
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
        settings_json = None if settings is None else rows.dump_json(settings)
        return await self._write(
            UPDATE_CONVERSATION, (title, settings_json, self._clock(), conversation_id)
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
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns.

        With `usage` (a model reply's, needing `run_id`): its ledger entry is recorded in the
        same transaction, as `record_usage` would (nothing for a reply that used no tokens).
        """
        if usage is not None and run_id is None:
            raise ValueError("usage is recorded against a run: give run_id")
        charge = usage if usage is not None and usage.total_tokens > 0 else None
        call = AppendCall(
            conversation_id,
            message,
            dump_message(message).decode(),
            run_id,
            charge,
            model,
            self._clock(),
        )
        return await self._write(APPEND if charge is None else APPEND_CHARGED, call)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after that compaction."""
        return await self._read_op(LOAD, conversation_id)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""

        async def body(db: Db) -> list[StoredMessage]:
            return await messages_after_seq(db, conversation_id, seq)

        return await self._read(body)

    async def message_count(self, conversation_id: int) -> int:
        async def body(db: Db) -> int:
            row = await fetchone(
                db, "SELECT last_seq FROM conversations WHERE id = ?", (conversation_id,)
            )
            if row is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return int(row[0])

        return await self._read(body)

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat (durably)."""
        return await self._write(CLAIM, (delivery_id, self._clock()))

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many.

        Keep them at least as long as a platform retries (Slack: ~5 minutes).
        """
        return await self._write(PRUNE, self._clock() - older_than_s)

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
        call = AcceptCall(
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
        accepted = await self._write(ACCEPT, call)
        if accepted is not None:  # committed: its id is final
            if len(self._accepted) >= _ACCEPTED_KEPT:
                del self._accepted[next(iter(self._accepted))]
            self._accepted[accepted.item.id] = (accepted.conversation.id, message)
        return accepted

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""

        async def body(db: Db) -> list[InboxItem]:
            found = await fetchall(
                db,
                "SELECT i.id, i.body, i.surface_ref, i.received_at FROM conversations c "
                "LEFT JOIN inbox i ON i.conversation_id = c.id AND i.state = 'pending' "
                "WHERE c.id = ? ORDER BY i.id",
                (conversation_id,),
            )
            if not found:
                raise KeyError(f"no conversation with id {conversation_id}")
            return [rows.inbox_item(conversation_id, row) for row in found if row[0] is not None]

        return await self._read(body)

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""

        async def body(db: Db) -> list[int]:
            found = await fetchall(
                db,
                "SELECT conversation_id FROM inbox WHERE state = 'pending' "
                "GROUP BY conversation_id ORDER BY MIN(id)",
            )
            return [int(row[0]) for row in found]

        return await self._read(body)

    async def deliver(
        self, conversation_id: int, item_ids: Sequence[int], *, run_id: int | None = None
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one transaction; items already settled are skipped."""
        ids = list(item_ids)
        delivery = Delivery(conversation_id, ids, self._known(conversation_id, ids))
        one_known = len(ids) == 1 and len(delivery.known) == 1
        call = DeliverCall(delivery, run_id, self._clock())
        stored = await self._write(DELIVER_KNOWN_ONE if one_known else DELIVER, call)
        self._forget(ids)
        return stored

    async def drop(self, conversation_id: int, item_ids: Sequence[int], reason: str) -> None:
        """Mark pending items as not to be answered; they never enter history."""
        ids = list(item_ids)
        await self._write(DROP, (conversation_id, ids, reason, self._clock()))
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
        ids = list(deliver)
        call = StartRunCall(
            conversation_id=conversation_id,
            user_id=user_id,
            channel_key=channel_key,
            model=model,
            surface_json=rows.dump_json(surface_ref or {}),
            owner_json=rows.dump_json(owner or {}),
            delivery=Delivery(conversation_id, ids, self._known(conversation_id, ids)),
            now=self._clock(),
            request=next(self._requests),
        )
        op = START_RUN_DELIVERING_ONE if len(ids) == 1 else START_RUN_DELIVERING
        record = await self._write(op if ids else START_RUN, call)
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
        return await self._write(FINISH_RUN, (run_id, outcome, error, self._clock()))

    async def set_run_surface_ref(self, run_id: int, ref: dict[str, Any]) -> RunRecord:
        """Replace where a run is shown (e.g. the message ts a surface learned on its first
        post), so that recovery after a restart can edit that message."""
        return await self._write(SURFACE_REF, (rows.dump_json(ref), run_id))

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: at start-up, the ones a crash interrupted."""

        async def body(db: Db) -> list[RunRecord]:
            found = await fetchall(
                db,
                f"SELECT {RUN_FIELDS} FROM runs WHERE outcome = 'running' ORDER BY started_at, id",
            )
            return [rows.run_record(row) for row in found]

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
        call = CompactionCall(
            conversation_id, summary, up_to_seq, rows.dump_json(details or {}), self._clock()
        )
        return await self._write(COMPACTION, call)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        await self._write(RECORD_USAGE, UsageCall(run_id, usage, model, self._clock()))

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

        async def body(db: Db) -> Usage:
            return rows.usage_of(await fetchone(db, sql, params))

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
        given (a vote is in scope when its run is), read in one statement (one snapshot)."""
        filters = {
            "conversation_id": conversation_id,
            "user_id": user_id,
            "channel_key": channel_key,
        }
        given = {column: value for column, value in filters.items() if value is not None}
        params = [since, *given.values()]

        def scope(table: str) -> str:
            return "".join(f" AND {table}.{column} = ?" for column in given)

        sql = (
            f"SELECT * FROM (SELECT {rows.USAGE_SUMS} FROM usage_ledger "
            f"WHERE at >= ?{scope('usage_ledger')}), "
            f"(SELECT COUNT(*) FROM runs WHERE started_at >= ?{scope('runs')}), "
            "(SELECT COALESCE(SUM(f.vote = 'up'), 0), COALESCE(SUM(f.vote = 'down'), 0) "
            f"FROM run_feedback f JOIN runs ON runs.id = f.run_id WHERE f.at >= ?{scope('runs')})"
        )

        async def body(db: Db) -> UsageSummary:
            row = await fetchone(db, sql, params * 3)
            return UsageSummary(
                usage=rows.usage_of(row[:5]),
                runs=int(row[5]),
                votes_up=int(row[6]),
                votes_down=int(row[7]),
            )

        return await self._read(body)

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(
        self, run_id: int, user_id: str, vote: Vote | None, *, channel_key: str | None = None
    ) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        return await self._write(FEEDBACK, (run_id, user_id, vote, self._clock(), channel_key))

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""
        return await self._read_op(CHANNEL_CONFIG_READ, channel_key)

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        await self._write(CHANNEL_CONFIG, (channel_key, config_json, by, self._clock()))

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
