"""The SQLite backend of `ConversationStore`, on aiosqlite.

Owns: the SQL behind every store method, the connection's pragmas and its transactions.

How it stays correct:
- One aiosqlite connection per store; its thread runs statements one at a time. An
  `asyncio.Lock` makes each store method one whole transaction on that connection, so
  coroutines never interleave statements inside each other's transactions.
- Writes of more than one statement run in `BEGIN IMMEDIATE`: the write lock is taken before
  anything is read, so a second process (a CLI beside the bot) waits on `busy_timeout` instead
  of failing with `SQLITE_BUSY` when its read snapshot went stale.
- WAL with `synchronous=NORMAL`: a commit appends to the WAL with `write()` before it returns,
  so once a method returns its data survives the *process* dying at any moment (SIGKILL,
  OOM): the bytes are in the OS page cache and the WAL is replayed on the next open. Only an
  OS crash or power loss can lose the last few commits (never corrupt the file); that trade
  buys appends without an fsync each. Use `synchronous=FULL` where that matters.
- A store method runs shielded from cancellation: a cancelled caller never leaves a half-done
  transaction behind, and the next caller never finds the connection mid-transaction.
- Appending reads and bumps `conversations.last_seq` inside the same transaction: no
  `COUNT(*)`, no scan, so message 10,000 costs what message 10 does.

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args

import aiosqlite

from core.messages import Message, Usage, UserMessage, dump_message, load_message
from storage.base import (
    Compaction,
    Conversation,
    ConversationStore,
    LoadedConversation,
    RunOutcome,
    RunRecord,
    SchemaError,
    StoredMessage,
)
from storage.migrations import MIGRATIONS, Migration, inspect, migrate

T = TypeVar("T")
Clock = Callable[[], float]
_Mode = Literal["read", "write", "single"]

_OUTCOMES: frozenset[str] = frozenset(get_args(RunOutcome))

_CONVERSATION_COLUMNS = "id, key, channel_key, title, settings, created_at, updated_at"
_RUN_COLUMNS = (
    "r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at, r.user_id, "
    "r.channel_key, r.model, r.error, r.surface_ref"
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

    def __init__(self, db: aiosqlite.Connection, path: str, clock: Clock) -> None:
        # Use `open()`: it checks the file, sets the pragmas and migrates.
        self._db = db
        self._path = path
        self._clock = clock
        self._lock = asyncio.Lock()
        self._closed = False

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
        if path != ":memory:":
            await asyncio.to_thread(Path(path).parent.mkdir, parents=True, exist_ok=True)
        db = await aiosqlite.connect(path, isolation_level=None)
        try:
            # Connection settings only; nothing is written before the file is recognised.
            await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000):d}")
            await db.execute("PRAGMA foreign_keys = ON")
            await inspect(db, path, migrations)
            (mode,) = next(iter(await db.execute_fetchall("PRAGMA journal_mode = WAL")))
            if path != ":memory:" and str(mode).lower() != "wal":
                raise SchemaError(f"{path}: could not switch to WAL mode (got {mode!r})")
            await db.execute("PRAGMA synchronous = NORMAL")
            await migrate(db, path, migrations)
        except BaseException:
            await db.close()
            raise
        return cls(db, path, clock)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            await self._db.close()

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

    async def _atomic(self, mode: _Mode, body: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run `body` as one transaction, whole, even if the caller is cancelled meanwhile.

        "write": BEGIN IMMEDIATE (several statements that must land together);
        "read": BEGIN (a consistent snapshot across several SELECTs);
        "single": one statement, atomic on its own (autocommit).
        """
        if self._closed:
            raise RuntimeError(f"the store for {self._path} is closed")
        return await asyncio.shield(self._transaction(mode, body))

    async def _transaction(
        self, mode: _Mode, body: Callable[[aiosqlite.Connection], Awaitable[T]]
    ) -> T:
        async with self._lock:
            db = self._db
            if mode == "single":
                return await body(db)
            await db.execute("BEGIN IMMEDIATE" if mode == "write" else "BEGIN")
            try:
                result = await body(db)
            except BaseException:
                await db.rollback()
                raise
            await db.commit()
            return result

    # --- conversations --------------------------------------------------------------------

    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation:
        async def body(db: aiosqlite.Connection) -> Conversation:
            now = self._clock()
            await db.execute(
                "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                (key, channel_key, title, now, now),
            )
            found = await _conversation_by(db, "key", key)
            assert found is not None
            return found

        return await self._atomic("write", body)

    async def get_conversation(self, key: str) -> Conversation | None:
        async def body(db: aiosqlite.Connection) -> Conversation | None:
            return await _conversation_by(db, "key", key)

        return await self._atomic("single", body)

    async def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> Conversation:
        """Set the title and/or replace the settings; `None` leaves a field as it is."""

        async def body(db: aiosqlite.Connection) -> Conversation:
            await db.execute(
                "UPDATE conversations SET title = COALESCE(?, title), "
                "settings = COALESCE(?, settings), updated_at = ? WHERE id = ?",
                (
                    title,
                    None if settings is None else _dump_json(settings),
                    self._clock(),
                    conversation_id,
                ),
            )
            found = await _conversation_by(db, "id", conversation_id)
            if found is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return found

        return await self._atomic("write", body)

    # --- messages -------------------------------------------------------------------------

    async def append_message(
        self, conversation_id: int, message: Message, *, run_id: int | None = None
    ) -> StoredMessage:
        """Append `message` as the conversation's next seq; committed when this returns."""
        body_json = dump_message(message).decode()
        author_id = author_name = platform_message_id = None
        if isinstance(message, UserMessage):
            platform_message_id = message.platform_message_id
            if message.author is not None:
                author_id, author_name = message.author.id, message.author.name

        async def body(db: aiosqlite.Connection) -> StoredMessage:
            now = self._clock()
            rows = list(
                await db.execute_fetchall(
                    "UPDATE conversations SET last_seq = last_seq + 1, updated_at = ? "
                    "WHERE id = ? RETURNING last_seq",
                    (now, conversation_id),
                )
            )
            if not rows:
                raise KeyError(f"no conversation with id {conversation_id}")
            seq = int(rows[0][0])
            await db.execute(
                "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
                "platform_message_id, run_id, created_at, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            return StoredMessage(seq=seq, message=message)

        return await self._atomic("write", body)

    async def load(self, conversation_id: int) -> LoadedConversation:
        """The conversation, its latest compaction and every message after that compaction."""

        async def body(db: aiosqlite.Connection) -> LoadedConversation:
            conversation = await _conversation_by(db, "id", conversation_id)
            if conversation is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            compaction = await _latest_compaction(db, conversation_id)
            after = compaction.up_to_seq if compaction else 0
            rows = await _message_rows_after(db, conversation_id, after)
            return LoadedConversation(conversation, compaction, _stored(rows))

        return await self._atomic("read", body)

    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]:
        """Messages with a seq greater than `seq`, in order (none for an unknown id)."""

        async def body(db: aiosqlite.Connection) -> list[StoredMessage]:
            return _stored(await _message_rows_after(db, conversation_id, seq))

        return await self._atomic("single", body)

    async def message_count(self, conversation_id: int) -> int:
        async def body(db: aiosqlite.Connection) -> int:
            rows = list(
                await db.execute_fetchall(
                    "SELECT last_seq FROM conversations WHERE id = ?", (conversation_id,)
                )
            )
            if not rows:
                raise KeyError(f"no conversation with id {conversation_id}")
            return int(rows[0][0])

        return await self._atomic("single", body)

    # --- deliveries -----------------------------------------------------------------------

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat (durably)."""

        async def body(db: aiosqlite.Connection) -> bool:
            cursor = await db.execute(
                "INSERT OR IGNORE INTO deliveries (id, claimed_at) VALUES (?, ?)",
                (delivery_id, self._clock()),
            )
            return cursor.rowcount == 1

        return await self._atomic("single", body)

    async def prune_deliveries(self, older_than_s: float) -> int:
        """Forget deliveries claimed more than `older_than_s` ago; return how many.

        Keep them at least as long as a platform retries (Slack: ~5 minutes).
        """

        async def body(db: aiosqlite.Connection) -> int:
            cursor = await db.execute(
                "DELETE FROM deliveries WHERE claimed_at < ?", (self._clock() - older_than_s,)
            )
            return cursor.rowcount

        return await self._atomic("single", body)

    # --- runs -----------------------------------------------------------------------------

    async def start_run(
        self,
        conversation_id: int,
        *,
        user_id: str | None = None,
        channel_key: str | None = None,
        model: str | None = None,
        surface_ref: dict[str, Any] | None = None,
    ) -> RunRecord:
        """Record a run as "running". `channel_key` defaults to the conversation's."""

        async def body(db: aiosqlite.Connection) -> RunRecord:
            cursor = await db.execute(
                "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, "
                "model, surface_ref) "
                "SELECT id, 'running', ?, ?, COALESCE(?, channel_key), ?, ? "
                "FROM conversations WHERE id = ?",
                (
                    self._clock(),
                    user_id,
                    channel_key,
                    model,
                    _dump_json(surface_ref or {}),
                    conversation_id,
                ),
            )
            if cursor.rowcount != 1 or cursor.lastrowid is None:
                raise KeyError(f"no conversation with id {conversation_id}")
            return await _run_by_id(db, cursor.lastrowid)

        return await self._atomic("write", body)

    async def finish_run(
        self, run_id: int, outcome: RunOutcome, *, error: str | None = None
    ) -> RunRecord:
        """Close a run with `outcome`, totalling its usage from the ledger.

        The first finish wins: finishing a run that is already finished changes nothing and
        returns it as it was (a late "done" cannot overwrite "aborted").
        """
        if outcome == "running" or outcome not in _OUTCOMES:
            raise ValueError(f"a run cannot finish as {outcome!r}")

        async def body(db: aiosqlite.Connection) -> RunRecord:
            await db.execute(
                "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
                "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
                f"= (SELECT {_USAGE_SUMS} FROM usage_ledger WHERE run_id = ?) "
                "WHERE id = ? AND outcome = 'running'",
                (outcome, error, self._clock(), run_id, run_id),
            )
            return await _run_by_id(db, run_id)

        return await self._atomic("write", body)

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running, oldest first: at start-up, the ones a crash interrupted."""

        async def body(db: aiosqlite.Connection) -> list[RunRecord]:
            rows = await db.execute_fetchall(
                "SELECT id FROM runs WHERE outcome = 'running' ORDER BY started_at, id"
            )
            return [await _run_by_id(db, int(row[0])) for row in rows]

        return await self._atomic("read", body)

    # --- compactions ----------------------------------------------------------------------

    async def add_compaction(
        self,
        conversation_id: int,
        summary: str,
        up_to_seq: int,
        details: dict[str, Any] | None = None,
    ) -> Compaction:
        """Store `summary` as standing in for messages 1..`up_to_seq` (which must exist)."""

        async def body(db: aiosqlite.Connection) -> Compaction:
            rows = list(
                await db.execute_fetchall(
                    "SELECT last_seq FROM conversations WHERE id = ?", (conversation_id,)
                )
            )
            if not rows:
                raise KeyError(f"no conversation with id {conversation_id}")
            last_seq = int(rows[0][0])
            if not 0 < up_to_seq <= last_seq:
                raise ValueError(
                    f"up_to_seq {up_to_seq} is outside the conversation's messages 1..{last_seq}"
                )
            now = self._clock()
            details_json = _dump_json(details or {})
            cursor = await db.execute(
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

        return await self._atomic("write", body)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""

        async def body(db: aiosqlite.Connection) -> None:
            cursor = await db.execute(
                "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, "
                "at, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
                "cost_usd) "
                "SELECT id, conversation_id, user_id, channel_key, COALESCE(?, model), "
                "?, ?, ?, ?, ?, ? FROM runs WHERE id = ?",
                (
                    model,
                    self._clock(),
                    usage.input,
                    usage.output,
                    usage.cache_read,
                    usage.cache_write,
                    usage.cost,
                    run_id,
                ),
            )
            if cursor.rowcount != 1:
                raise KeyError(f"no run with id {run_id}")

        await self._atomic("single", body)

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

        async def body(db: aiosqlite.Connection) -> Usage:
            rows = list(
                await db.execute_fetchall(
                    f"SELECT {_USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}", params
                )
            )
            return _usage(rows[0])

        return await self._atomic("single", body)


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


# --- rows to records ---------------------------------------------------------------------


def _dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _conversation_by(
    db: aiosqlite.Connection, column: Literal["id", "key"], value: int | str
) -> Conversation | None:
    rows = list(
        await db.execute_fetchall(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE {column} = ?", (value,)
        )
    )
    if not rows:
        return None
    row = rows[0]
    return Conversation(
        id=int(row[0]),
        key=str(row[1]),
        channel_key=str(row[2]),
        title=row[3],
        settings=json.loads(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
    )


async def _latest_compaction(db: aiosqlite.Connection, conversation_id: int) -> Compaction | None:
    rows = list(
        await db.execute_fetchall(
            "SELECT id, summary, up_to_seq, details, created_at FROM compactions "
            "WHERE conversation_id = ? ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        )
    )
    if not rows:
        return None
    row = rows[0]
    return Compaction(
        id=int(row[0]),
        conversation_id=conversation_id,
        summary=str(row[1]),
        up_to_seq=int(row[2]),
        created_at=float(row[4]),
        details=json.loads(row[3]),
    )


async def _message_rows_after(
    db: aiosqlite.Connection, conversation_id: int, seq: int
) -> Iterable[sqlite3.Row]:
    return await db.execute_fetchall(
        "SELECT seq, body FROM messages WHERE conversation_id = ? AND seq > ? ORDER BY seq",
        (conversation_id, seq),
    )


def _stored(rows: Iterable[sqlite3.Row]) -> list[StoredMessage]:
    # Parsing thousands of messages creates objects faster than the cyclic GC's thresholds
    # expect; its repeated passes over a big heap would more than double the time of a long
    # load. Nothing here forms cycles, so the collector resumes once the batch is built.
    # (Synchronous, no await inside: no other coroutine runs while it is paused.)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [StoredMessage(seq=int(row[0]), message=load_message(row[1])) for row in rows]
    finally:
        if was_enabled:
            gc.enable()


async def _run_by_id(db: aiosqlite.Connection, run_id: int) -> RunRecord:
    rows = list(
        await db.execute_fetchall(
            f"SELECT {_RUN_COLUMNS}, r.input_tokens, r.output_tokens, r.cache_read_tokens, "
            "r.cache_write_tokens, r.cost_usd "
            "FROM runs r JOIN conversations c ON c.id = r.conversation_id WHERE r.id = ?",
            (run_id,),
        )
    )
    if not rows:
        raise KeyError(f"no run with id {run_id}")
    row = tuple(rows[0])
    if row[3] == "running":
        # A running run's usage is the ledger so far; a finished one's was totalled at finish.
        sums = list(
            await db.execute_fetchall(
                f"SELECT {_USAGE_SUMS} FROM usage_ledger WHERE run_id = ?", (run_id,)
            )
        )
        row = row[:11] + tuple(sums[0])
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
        usage=_usage(row[11:16]),
    )


def _usage(row: Sequence[Any]) -> Usage:
    return Usage(
        input=int(row[0]),
        output=int(row[1]),
        cache_read=int(row[2]),
        cache_write=int(row[3]),
        cost=float(row[4]),
    )
