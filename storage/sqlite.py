"""The SQLite backend of `ConversationStore`, on the stdlib `sqlite3` and one thread per store.

Owns: the SQL behind every store method, the connection's pragmas and its transactions, and the
thread that runs them.

How it stays correct and fast:
- One connection per store, created, used and closed only by the store's own daemon thread.
  Every store method hands that thread ONE synchronous function (its whole transaction body)
  and awaits ONE future: a call costs one hop to the thread and back, however many statements
  it runs. Results come back with `loop.call_soon_threadsafe`, once per batch, not per call.
- Group commit: the thread takes everything pending (at most `_MAX_BATCH` calls) at once.
  The batch's reads run first, in one read transaction (one snapshot), and are answered at
  once. Its writes then run in ONE `BEGIN IMMEDIATE ... COMMIT`, each body inside its own
  `SAVEPOINT`: a body that raises is rolled back alone and its exception goes to its own
  caller; every other caller is answered only after the `COMMIT` succeeded ("each method
  commits before it returns"). If the `COMMIT` fails, every writer of the batch gets the error.
  Every call in a batch was pending at the same moment, so running its reads before its writes
  is a valid order: a read still sees every write whose call returned before it was issued.
- `BEGIN IMMEDIATE` takes the write lock before anything is read, so a second process (a CLI
  beside the bot) waits on `busy_timeout` (in the store's thread, never the event loop)
  instead of failing with `SQLITE_BUSY` when its read snapshot went stale.
- WAL with `synchronous=NORMAL`: a commit appends to the WAL with `write()` before it returns,
  so once a method returns its data survives the *process* dying at any moment (SIGKILL,
  OOM): the bytes are in the OS page cache and the WAL is replayed on the next open. Only an
  OS crash or power loss can lose the last few commits (never corrupt the file); that trade
  buys appends without an fsync each. Use `synchronous=FULL` where that matters.
- Cancellation: a call is queued the moment its coroutine starts and then runs whole (or, if
  its body raises, not at all) whether or not its caller is still waiting; a cancelled caller
  just never hears the result. The thread never leaves a transaction open between batches.
- Appending reads and bumps `conversations.last_seq` inside the same transaction: no
  `COUNT(*)`, no scan, so message 10,000 costs what message 10 does.
- `close()` queues a stop behind everything already queued, so pending calls finish first;
  a store that is garbage collected unclosed stops its thread too, and the thread is a daemon,
  so an exiting process never waits for it.

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args

from core.messages import Message, Usage, UserMessage, dump_message, load_message
from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    ConversationStore,
    InboxItem,
    LoadedConversation,
    RunOutcome,
    RunRecord,
    SchemaError,
    StoredMessage,
)
from storage.migrations import MIGRATIONS, Migration, inspect, migrate

T = TypeVar("T")
Clock = Callable[[], float]
Body = Callable[[sqlite3.Connection], T]

# The most calls one batch (and so one write transaction) takes: bounds the latency a call can
# add to the calls queued behind it.
_MAX_BATCH = 500

_OUTCOMES: frozenset[str] = frozenset(get_args(RunOutcome))

_CONVERSATION_COLUMNS = "id, key, channel_key, title, settings, created_at, updated_at"
_RUN_COLUMNS = (
    "r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at, r.user_id, "
    "r.channel_key, r.model, r.error, r.surface_ref, r.owner"
)
_USAGE_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_usd), 0.0)"
)


class SqliteStore:
    """Persisted conversations in one SQLite file. Open with `SqliteStore.open(path)`:

        async with SqliteStore.open("teammate.db") as store: ...
        store = await SqliteStore.open("teammate.db")  # then: await store.close()

    Methods given an unknown conversation or run id raise `KeyError`.
    """

    def __init__(self, db: _DbThread, path: str, clock: Clock) -> None:
        # Use `open()`: it starts the thread, checks the file, sets the pragmas and migrates.
        self._db = db
        self._path = path
        self._clock = clock
        self._closed = False
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
        newer Teammate; such a file is left untouched. `":memory:"` gives a private,
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
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
            if path != ":memory:" and str(mode).lower() != "wal":
                raise SchemaError(f"{path}: could not switch to WAL mode (got {mode!r})")
            db.execute("PRAGMA synchronous = NORMAL")
            migrate(db, path, migrations)

        db = _DbThread(path, busy_timeout_s)
        try:
            await db.submit("setup", setup)
        except BaseException:
            db.stop()  # after the setup (even a cancelled caller's): closes the connection
            raise
        return cls(db, path, clock)

    async def close(self) -> None:
        """Finish every call already made, then close the connection and stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        await self._db.submit("stop", _nothing)
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
            found = _conversation_by(db, "key", key)
            assert found is not None
            return found

        return await self._write(body)

    async def get_conversation(self, key: str) -> Conversation | None:
        def body(db: sqlite3.Connection) -> Conversation | None:
            return _conversation_by(db, "key", key)

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
            None if settings is None else _dump_json(settings),
            self._clock(),
            conversation_id,
        )

        def body(db: sqlite3.Connection) -> Conversation:
            db.execute(
                "UPDATE conversations SET title = COALESCE(?, title), "
                "settings = COALESCE(?, settings), updated_at = ? WHERE id = ?",
                params,
            )
            found = _conversation_by(db, "id", conversation_id)
            if found is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return found

        return await self._write(body)

    # --- messages -------------------------------------------------------------------------

    async def append_message(
        self, conversation_id: int, message: Message, *, run_id: int | None = None
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns."""
        body_json = dump_message(message).decode()
        now = self._clock()

        def body(db: sqlite3.Connection) -> StoredMessage:
            seq = _append(db, conversation_id, message, body_json, run_id, now)
            return StoredMessage(seq=seq, message=message)

        return await self._write(body)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after that compaction."""

        def body(db: sqlite3.Connection) -> LoadedConversation:
            conversation = _conversation_by(db, "id", conversation_id)
            if conversation is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            compaction = _latest_compaction(db, conversation_id)
            after = compaction.up_to_seq if compaction else 0
            messages = _messages_after(db, conversation_id, after)
            return LoadedConversation(conversation, compaction, messages)

        return await self._read(body)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""

        def body(db: sqlite3.Connection) -> list[StoredMessage]:
            return _messages_after(db, conversation_id, seq)

        return await self._read(body)

    async def message_count(self, conversation_id: int) -> int:
        def body(db: sqlite3.Connection) -> int:
            row = _conversation_row(db, conversation_id, "last_seq")
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
    ) -> Accepted | None:
        """Claim, get or create, backfill a new conversation, and queue `message`: ONE
        transaction, so a cancel or crash either loses nothing or did nothing (a retry of the
        same delivery is then accepted). None for a repeated `delivery_id`."""
        now = self._clock()
        body_json = dump_message(message).decode()
        ref_json = _dump_json(surface_ref or {})
        backfill_json = [(earlier, dump_message(earlier).decode()) for earlier in backfill]

        def body(db: sqlite3.Connection) -> Accepted | None:
            if delivery_id is not None:
                claimed = db.execute(
                    "INSERT OR IGNORE INTO deliveries (id, claimed_at) VALUES (?, ?)",
                    (delivery_id, now),
                )
                if claimed.rowcount != 1:
                    return None
            db.execute(
                "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                (conversation_key, channel_key, title, now, now),
            )
            conversation = _conversation_by(db, "key", conversation_key)
            assert conversation is not None
            # New means nothing was ever said here: no history and nothing accepted before.
            created = (
                int(_conversation_row(db, conversation.id, "last_seq")[0]) == 0
                and db.execute(
                    "SELECT 1 FROM inbox WHERE conversation_id = ? LIMIT 1", (conversation.id,)
                ).fetchone()
                is None
            )
            if created:
                for earlier, earlier_json in backfill_json:
                    _append(db, conversation.id, earlier, earlier_json, None, now)
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

        return await self._write(body)

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order."""

        def body(db: sqlite3.Connection) -> list[InboxItem]:
            _conversation_row(db, conversation_id, "id")
            rows = db.execute(
                "SELECT id, body, surface_ref, received_at FROM inbox "
                "WHERE conversation_id = ? AND state = 'pending' ORDER BY id",
                (conversation_id,),
            ).fetchall()
            return [
                InboxItem(
                    id=int(row[0]),
                    conversation_id=conversation_id,
                    message=load_message(row[1]),
                    surface_ref=json.loads(row[2]),
                    received_at=float(row[3]),
                )
                for row in rows
            ]

        return await self._read(body)

    async def pending_conversations(self) -> list[int]:
        """Conversations with pending inbox items, the one waiting longest first."""

        def body(db: sqlite3.Connection) -> list[int]:
            rows = db.execute(
                "SELECT conversation_id FROM inbox WHERE state = 'pending' "
                "GROUP BY conversation_id ORDER BY MIN(id)"
            ).fetchall()
            return [int(row[0]) for row in rows]

        return await self._read(body)

    async def deliver(
        self, conversation_id: int, item_ids: Sequence[int], *, run_id: int | None = None
    ) -> list[StoredMessage]:
        """Append the pending items' messages to history in the order given and mark them
        delivered, in one transaction; items already settled are skipped."""
        ids = list(item_ids)
        now = self._clock()

        def body(db: sqlite3.Connection) -> list[StoredMessage]:
            rows = _inbox_rows(db, conversation_id, ids)
            stored: list[StoredMessage] = []
            for item_id in ids:
                state, body_json = rows[item_id]
                if state != "pending":
                    continue
                assert body_json is not None  # a pending item keeps its body
                rows[item_id] = ("delivered", None)  # an id given twice is delivered once
                message = load_message(body_json)
                seq = _append(db, conversation_id, message, body_json, run_id, now)
                db.execute(
                    "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, "
                    "seq = ?, run_id = ? WHERE id = ?",
                    (now, seq, run_id, item_id),
                )
                stored.append(StoredMessage(seq=seq, message=message))
            return stored

        return await self._write(body)

    async def drop(self, conversation_id: int, item_ids: Sequence[int], reason: str) -> None:
        """Mark pending items as not to be answered; they never enter history."""
        ids = list(item_ids)
        now = self._clock()

        def body(db: sqlite3.Connection) -> None:
            _inbox_rows(db, conversation_id, ids)
            db.executemany(
                "UPDATE inbox SET state = 'dropped', settled_at = ?, reason = ? "
                "WHERE id = ? AND state = 'pending'",
                [(now, reason, item_id) for item_id in ids],
            )

        await self._write(body)

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
    ) -> RunRecord:
        """Record a run as "running". `channel_key` defaults to the conversation's."""
        now = self._clock()
        surface_json = _dump_json(surface_ref or {})
        owner_json = _dump_json(owner or {})

        def body(db: sqlite3.Connection) -> RunRecord:
            found = _conversation_row(db, conversation_id, "key, channel_key")
            run_channel = found[1] if channel_key is None else channel_key
            cursor = db.execute(
                "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, "
                "model, surface_ref, owner) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)",
                (conversation_id, now, user_id, run_channel, model, surface_json, owner_json),
            )
            assert cursor.lastrowid is not None
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

        return await self._write(body)

    async def finish_run(
        self, run_id: int, outcome: RunOutcome, *, error: str | None = None
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger.

        The first finish wins: finishing a run that is already finished changes nothing and
        returns it as it was (a late "done" cannot overwrite "aborted").
        """
        if outcome == "running" or outcome not in _OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")
        params = (outcome, error, self._clock(), run_id, run_id)

        def body(db: sqlite3.Connection) -> RunRecord:
            db.execute(
                "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
                "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
                f"= (SELECT {_USAGE_SUMS} FROM usage_ledger WHERE run_id = ?) "
                "WHERE id = ? AND outcome = 'running'",
                params,
            )
            return _run_by_id(db, run_id)

        return await self._write(body)

    async def set_run_surface_ref(self, run_id: int, ref: dict[str, Any]) -> RunRecord:
        """Replace where a run is shown (e.g. the message ts a surface learned on its first
        post), so that recovery after a restart can edit that message."""
        ref_json = _dump_json(ref)

        def body(db: sqlite3.Connection) -> RunRecord:
            db.execute("UPDATE runs SET surface_ref = ? WHERE id = ?", (ref_json, run_id))
            return _run_by_id(db, run_id)

        return await self._write(body)

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: at start-up, the ones a crash interrupted."""

        def body(db: sqlite3.Connection) -> list[RunRecord]:
            rows = db.execute(
                "SELECT id FROM runs WHERE outcome = 'running' ORDER BY started_at, id"
            ).fetchall()
            return [_run_by_id(db, int(row[0])) for row in rows]

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
        details_json = _dump_json(details or {})

        def body(db: sqlite3.Connection) -> Compaction:
            row = _conversation_row(db, conversation_id, "last_seq")
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
        params = (
            model,
            self._clock(),
            usage.input,
            usage.output,
            usage.cache_read,
            usage.cache_write,
            usage.cost,
            run_id,
        )

        def body(db: sqlite3.Connection) -> None:
            cursor = db.execute(
                "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, "
                "at, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                "cost_usd) "
                "SELECT id, conversation_id, user_id, channel_key, COALESCE(?, model), "
                "?, ?, ?, ?, ?, ? FROM runs WHERE id = ?",
                params,
            )
            if cursor.rowcount != 1:
                raise KeyError(f"no run with id {run_id}")

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
        sql = f"SELECT {_USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}"

        def body(db: sqlite3.Connection) -> Usage:
            return _usage(db.execute(sql, params).fetchone())

        return await self._read(body)


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


# --- the store's thread ----------------------------------------------------------------------

_Kind = Literal["setup", "read", "write", "stop"]


def _nothing(db: sqlite3.Connection) -> None:
    return None


class _Call:
    """One store call waiting for the thread: its body, and where its result goes."""

    __slots__ = ("body", "error", "future", "kind", "loop", "value")

    def __init__(
        self,
        kind: _Kind,
        body: Body[Any],
        loop: asyncio.AbstractEventLoop | None,
        future: asyncio.Future[Any] | None,
    ) -> None:
        self.kind = kind
        self.body = body
        self.loop = loop
        self.future = future
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self, db: sqlite3.Connection) -> bool:
        """Run the body; keep its result or exception. True if it returned."""
        try:
            self.value = self.body(db)
        except Exception as exc:
            self.error = exc
            return False
        self.error = None
        return True


class _DbThread:
    """A daemon thread that owns one connection and runs store calls in batches.

    Holds no reference to the store, so a forgotten store can be collected (its finalizer
    then stops this thread).
    """

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, name=f"sqlite-store:{path}", daemon=True
        )
        self._thread.start()

    def submit(self, kind: _Kind, body: Body[T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put(_Call(kind, body, loop, future))
        return future

    def join(self) -> None:
        """Wait for the thread to end: only after its stop was answered, so a moment at most."""
        self._thread.join(timeout=5.0)

    def stop(self) -> None:
        """Stop after everything queued so far, without waiting (a finalizer's stop)."""
        self._calls.put(_Call("stop", _nothing, None, None))

    # --- on the thread --------------------------------------------------------------------

    def _serve(self) -> None:
        db: sqlite3.Connection | None = None
        broken: BaseException | None = None
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # autocommit: every transaction here is explicit
                cached_statements=256,
            )
        except Exception as exc:
            broken = exc
        calls = self._calls
        held: _Call | None = None
        stop: _Call | None = None
        while stop is None:
            call = held if held is not None else calls.get()
            held = None
            if call.kind == "stop":
                stop = call
                break
            if db is None:
                assert broken is not None
                call.error = broken
                _deliver([call])
                continue
            if call.kind == "setup":
                call.run(db)
                _deliver([call])
                continue
            held = self._run_batch(db, call)
            del call  # keep no result alive while waiting for the next call

        if db is not None:
            with contextlib.suppress(Exception):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                db.close()
        # Nothing should be queued behind a stop (a closed store refuses calls); if anything
        # is, it must not wait forever.
        while True:
            try:
                late = calls.get_nowait()
            except queue.Empty:
                break
            late.error = RuntimeError(f"the store for {self._path} is closed")
            _deliver([late])
        _deliver([stop])  # the last thing this thread does

    def _run_batch(self, db: sqlite3.Connection, first: _Call) -> _Call | None:
        """Run `first` and whatever else is queued behind it (up to `_MAX_BATCH` reads and
        writes): reads in one snapshot, answered at once, then writes in one transaction,
        answered after its COMMIT. Returns a setup or stop call met meanwhile, to run next."""
        reads: list[_Call] = []
        writes: list[_Call] = []
        (reads if first.kind == "read" else writes).append(first)
        held: _Call | None = None
        while len(reads) + len(writes) < _MAX_BATCH:
            try:
                more = self._calls.get_nowait()
            except queue.Empty:
                break
            if more.kind == "read":
                reads.append(more)
            elif more.kind == "write":
                writes.append(more)
            else:
                held = more
                break
        if reads:
            _run_reads(db, reads)
            _deliver(reads)
        if writes:
            _run_writes(db, writes)
            _deliver(writes)
        return held


def _run_reads(db: sqlite3.Connection, reads: list[_Call]) -> None:
    """Run read bodies in one read transaction: one snapshot for the whole batch."""
    try:
        db.execute("BEGIN")
    except Exception as exc:
        for call in reads:
            call.error = exc
        return
    for call in reads:
        if not db.in_transaction:  # SQLite ended it after an error: start another
            try:
                db.execute("BEGIN")
            except Exception as exc:
                call.error = exc
                continue
        call.run(db)
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("COMMIT")
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _run_writes(db: sqlite3.Connection, writes: list[_Call]) -> None:
    """Run write bodies in one `BEGIN IMMEDIATE ... COMMIT`, each in its own SAVEPOINT.

    A body that raises is undone alone (its caller gets its exception). If SQLite rolled the
    whole transaction back meanwhile (e.g. disk full), the bodies that had succeeded are undone
    too: they run again, in a new transaction, without the one that failed. Bodies that
    succeeded keep `error = None` only once the COMMIT succeeded.
    """
    todo = writes
    while todo:
        try:
            db.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            for call in todo:
                call.error = exc
            return
        succeeded: list[_Call] = []
        lost_at: int | None = None
        for position, call in enumerate(todo):
            try:
                db.execute("SAVEPOINT store_call")
            except Exception as exc:
                call.error = exc
                _abandon(db)
                lost_at = position
                break
            if call.run(db):
                try:
                    db.execute("RELEASE store_call")
                except Exception as exc:
                    call.error = exc
                    _abandon(db)
                    lost_at = position
                    break
                succeeded.append(call)
            elif not _undo_savepoint(db):
                lost_at = position
                break
        if lost_at is not None:
            todo = succeeded + todo[lost_at + 1 :]
            continue
        try:
            db.execute("COMMIT")
        except Exception as exc:
            with contextlib.suppress(Exception):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            for call in succeeded:
                call.value = None
                call.error = exc
        return


def _undo_savepoint(db: sqlite3.Connection) -> bool:
    """Roll back the current call's savepoint; False if the whole transaction is gone."""
    if not db.in_transaction:
        return False
    try:
        db.execute("ROLLBACK TO store_call")
        db.execute("RELEASE store_call")
    except Exception:
        _abandon(db)
        return False
    return True


def _abandon(db: sqlite3.Connection) -> None:
    """After a failed SAVEPOINT, RELEASE or ROLLBACK TO: end the transaction in doubt."""
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _deliver(calls: list[_Call]) -> None:
    """Hand each call's outcome to its event loop: one wake-up per loop for the whole list."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
    for call in calls:
        if call.loop is not None:
            by_loop.setdefault(call.loop, []).append(call)
    for loop, settled in by_loop.items():
        # A closed loop has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, settled)


def _settle(calls: list[_Call]) -> None:
    for call in calls:
        future = call.future
        if future is None or future.done():  # e.g. its caller was cancelled
            continue
        if call.error is None:
            future.set_result(call.value)
        else:
            future.set_exception(call.error)


# --- rows to records ---------------------------------------------------------------------


def _dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _conversation_by(
    db: sqlite3.Connection, column: Literal["id", "key"], value: int | str
) -> Conversation | None:
    row = db.execute(
        f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE {column} = ?", (value,)
    ).fetchone()
    if row is None:
        return None
    return Conversation(
        id=int(row[0]),
        key=str(row[1]),
        channel_key=str(row[2]),
        title=row[3],
        settings=json.loads(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
    )


def _append(
    db: sqlite3.Connection,
    conversation_id: int,
    message: Message,
    body_json: str,
    run_id: int | None,
    now: float,
) -> int:
    """Append one message as the conversation's next seq and return that seq."""
    row = db.execute(
        "UPDATE conversations SET last_seq = last_seq + 1, updated_at = ? "
        "WHERE id = ? RETURNING last_seq",
        (now, conversation_id),
    ).fetchone()
    if row is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    seq = int(row[0])
    author_id = author_name = platform_message_id = None
    if isinstance(message, UserMessage):
        platform_message_id = message.platform_message_id
        if message.author is not None:
            author_id, author_name = message.author.id, message.author.name
    db.execute(
        "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
        "platform_message_id, run_id, created_at, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            seq,
            message.role,
            author_id,
            author_name,
            platform_message_id,
            run_id,
            now,
            body_json,
        ),
    )
    return seq


def _inbox_rows(
    db: sqlite3.Connection, conversation_id: int, item_ids: list[int]
) -> dict[int, tuple[str, str | None]]:
    """State and body of each of `item_ids`; KeyError unless all are this conversation's."""
    found: dict[int, tuple[str, str | None]] = {}
    for item_id in item_ids:
        row = db.execute(
            "SELECT state, body FROM inbox WHERE id = ? AND conversation_id = ?",
            (item_id, conversation_id),
        ).fetchone()
        if row is None:
            raise KeyError(f"no inbox item {item_id} in conversation {conversation_id}")
        found[item_id] = (str(row[0]), row[1])
    return found


def _latest_compaction(db: sqlite3.Connection, conversation_id: int) -> Compaction | None:
    row = db.execute(
        "SELECT id, summary, up_to_seq, details, created_at FROM compactions "
        "WHERE conversation_id = ? ORDER BY id DESC LIMIT 1",
        (conversation_id,),
    ).fetchone()
    if row is None:
        return None
    return Compaction(
        id=int(row[0]),
        conversation_id=conversation_id,
        summary=str(row[1]),
        up_to_seq=int(row[2]),
        created_at=float(row[4]),
        details=json.loads(row[3]),
    )


def _messages_after(db: sqlite3.Connection, conversation_id: int, seq: int) -> list[StoredMessage]:
    rows = db.execute(
        "SELECT seq, body FROM messages WHERE conversation_id = ? AND seq > ? ORDER BY seq",
        (conversation_id, seq),
    ).fetchall()
    # Parsing thousands of messages creates objects faster than the cyclic GC's thresholds
    # expect; its repeated passes over a big heap would more than double the time of a long
    # load. Nothing here forms cycles, so the collector resumes once the batch is built.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [StoredMessage(seq=int(row[0]), message=load_message(row[1])) for row in rows]
    finally:
        if was_enabled:
            gc.enable()


def _conversation_row(db: sqlite3.Connection, conversation_id: int, columns: str) -> Any:
    """`columns` of one conversation; KeyError if there is no such conversation."""
    found = db.execute(
        f"SELECT {columns} FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if found is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return found


def _run_by_id(db: sqlite3.Connection, run_id: int) -> RunRecord:
    found = db.execute(
        f"SELECT {_RUN_COLUMNS}, r.input_tokens, r.output_tokens, r.cache_read_tokens, "
        "r.cache_write_tokens, r.cost_usd "
        "FROM runs r JOIN conversations c ON c.id = r.conversation_id WHERE r.id = ?",
        (run_id,),
    ).fetchone()
    if found is None:
        raise KeyError(f"no run with id {run_id}")
    row = tuple(found)
    if row[3] == "running":
        # A running run's usage is the ledger so far; a finished one's was totalled at finish.
        sums = db.execute(
            f"SELECT {_USAGE_SUMS} FROM usage_ledger WHERE run_id = ?", (run_id,)
        ).fetchone()
        row = row[:12] + tuple(sums)
    return _run_record(row)


def _run_record(row: Sequence[Any]) -> RunRecord:
    outcome = str(row[3])
    if outcome not in _OUTCOMES:
        raise SchemaError(f"run {row[0]} has an unknown outcome {outcome!r}")
    return RunRecord(
        id=int(row[0]),
        conversation_id=int(row[1]),
        conversation_key=str(row[2]),
        outcome=cast(RunOutcome, outcome),
        started_at=float(row[4]),
        finished_at=None if row[5] is None else float(row[5]),
        user_id=row[6],
        channel_key=row[7],
        model=row[8],
        error=row[9],
        surface_ref=json.loads(row[10]),
        owner=json.loads(row[11]),
        usage=_usage(row[12:17]),
    )


def _usage(row: Sequence[Any]) -> Usage:
    return Usage(
        input=int(row[0]),
        output=int(row[1]),
        cache_read=int(row[2]),
        cache_write=int(row[3]),
        cost=float(row[4]),
    )
