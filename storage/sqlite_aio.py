"""The SQLite backend of `ConversationStore` on aiosqlite, with set-oriented batches.

Owns: the SQL behind every store method, the connections' pragmas, and opening a file
(checks, then migrations). When calls run alone and when together is `storage.batching`;
mapping rows to records is `sqlite_rows`.

How it stays correct and fast (docs/architecture.md, "Storage"):
- Two connections on one file (WAL): a writer, and a reader for every read. A read never
  waits for a write batch and sees exactly what was committed before it was issued. (An
  in-memory database has one connection: its reads queue with the writes.)
- Every write goes through the batcher. A call alone is one round trip to the driver's
  thread: one autocommit statement where the method is one statement (an append, a claim, a
  finish, a usage entry...), else its statements between BEGIN IMMEDIATE and COMMIT. Calls
  made meanwhile run as one batch whose statement count does not grow with the calls:
  lookups through `json_each`, `executemany`, `INSERT ... RETURNING`.
- Appending is ONE statement: `INSERT INTO messages ... SELECT last_seq + 1 FROM
  conversations`, and a TEMP trigger of the writer's connection (nothing in the file) moves
  `conversations.last_seq` with each insert. No `COUNT(*)`, no scan: message 10,000 costs
  what message 10 does.
- WAL with `synchronous=NORMAL`: once a method returns, its data survives the process dying
  at any moment; only an OS crash can lose the last commits (never corrupt the file).
- Messages are parsed on the driver's thread while rows are fetched (an SQLite converter
  named by the column), not on the event loop.

Must not: import `tools` or `bots`; return rows (callers get `core` messages and records).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import sqlite3
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite

from core.messages import Message, Usage, UserMessage, dump_message, load_message
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
from storage.batching import Batcher, Op
from storage.migrations import (
    MIGRATIONS,
    Migration,
    inspect,
    integrity_problems,
    migrate,
    refuse_damaged,
)

T = TypeVar("T")
Clock = Callable[[], float]
Db = aiosqlite.Connection

# A column named `"x [teammate_message]"` is parsed into a `Message` as it is fetched.
sqlite3.register_converter("teammate_message", load_message)

# How many accepted, not yet delivered messages a store keeps in memory (see `_accepted`).
_ACCEPTED_KEPT = 4096

_LAST_SEQ_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_last_seq AFTER INSERT ON main.messages BEGIN "
    "UPDATE conversations SET last_seq = NEW.seq, updated_at = NEW.created_at "
    "WHERE id = NEW.conversation_id AND last_seq < NEW.seq; END"
)
# A message's queryable columns, from its stored JSON (as `_message_row` takes them from it).
_FROM_JSON = (
    "json_extract({0}, '$.role'), json_extract({0}, '$.author.id'), "
    "json_extract({0}, '$.author.name'), json_extract({0}, '$.platform_message_id')"
)
# Accepting a delivery is ONE statement, `INSERT INTO teammate_accept` (one row per call), so
# a call alone is one autocommit statement and a batch of them is one statement too. Per row:
# a repeat (any id claimed before, by another call or an earlier row) is skipped whole; else
# the ids are claimed, the conversation made if missing, the backfill stored if nothing was
# ever said there, the message queued; the outcome waits in `teammate_accepted` by request.
_ACCEPT_SETUP = [
    "CREATE TEMP VIEW IF NOT EXISTS teammate_accept (request, conversation_key, channel_key, "
    "title, claims, delivery_id, body, surface_ref, received_at, backfill) AS SELECT NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0",
    "CREATE TEMP TABLE IF NOT EXISTS teammate_accepted "
    "(request INTEGER PRIMARY KEY, conversation_id INTEGER, created INTEGER, item_id INTEGER)",
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_accept_one INSTEAD OF INSERT ON teammate_accept "
    "BEGIN "
    "SELECT RAISE(IGNORE) WHERE EXISTS (SELECT 1 FROM deliveries "
    "WHERE id IN (SELECT value FROM json_each(NEW.claims))); "
    "INSERT INTO deliveries (id, claimed_at) "
    "SELECT value, NEW.received_at FROM json_each(NEW.claims); "
    "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) VALUES "
    "(NEW.conversation_key, NEW.channel_key, NEW.title, NEW.received_at, NEW.received_at) "
    "ON CONFLICT (key) DO NOTHING; "
    "INSERT INTO teammate_accepted (request, conversation_id, created) "
    "SELECT NEW.request, id, last_seq = 0 AND NOT EXISTS "
    "(SELECT 1 FROM inbox WHERE inbox.conversation_id = conversations.id) "
    "FROM conversations WHERE key = NEW.conversation_key; "
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) "
    f"SELECT a.conversation_id, b.key + 1, {_FROM_JSON.format('b.value')}, NULL, "
    "NEW.received_at, b.value FROM teammate_accepted a, json_each(NEW.backfill) b "
    "WHERE a.request = NEW.request AND a.created; "
    "INSERT INTO inbox (conversation_id, delivery_id, body, surface_ref, received_at) "
    "SELECT conversation_id, NEW.delivery_id, NEW.body, NEW.surface_ref, NEW.received_at "
    "FROM teammate_accepted WHERE request = NEW.request; "
    "UPDATE teammate_accepted SET item_id = last_insert_rowid() WHERE request = NEW.request; "
    "END",
]
# Delivering an inbox item is marking it delivered at its seq: the message enters history in
# the same statement.
_DELIVER_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_deliver AFTER UPDATE OF state ON main.inbox "
    "WHEN OLD.state = 'pending' AND NEW.state = 'delivered' BEGIN "
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) VALUES (NEW.conversation_id, NEW.seq, "
    f"{_FROM_JSON.format('OLD.body')}, NEW.run_id, NEW.settled_at, OLD.body); END"
)
_INSERT_MESSAGE = (
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_APPEND_MESSAGE = (
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) "
    "SELECT id, last_seq + 1, ?, ?, ?, ?, ?, ?, ? FROM conversations WHERE id = ? RETURNING seq"
)
# `_APPEND_MESSAGE` for a batch: without RETURNING (`executemany`), and skipped when the
# reply's usage names an unknown run (its ledger entry then failed the same way).
_APPEND_CHARGED = (
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) "
    "SELECT id, last_seq + 1, ?, ?, ?, ?, ?, ?, ? FROM conversations WHERE id = ? "
    "AND (NOT ? OR EXISTS (SELECT 1 FROM runs WHERE runs.id = ?))"
)
_RECORD_USAGE = (
    "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
    "SELECT id, conversation_id, user_id, channel_key, COALESCE(?, model), ?, ?, ?, ?, ?, ? "
    "FROM runs WHERE id = ?"
)
# A run as `sqlite_rows.run_record` reads it; a running run's usage is its ledger so far, a
# finished one's was totalled at finish. Usable in SELECT ... FROM runs and in RETURNING.
_RUN_FIELDS = ", ".join(
    [
        "runs.id, runs.conversation_id",
        "(SELECT key FROM conversations WHERE conversations.id = runs.conversation_id)",
        "runs.outcome, runs.started_at, runs.finished_at, runs.user_id, runs.channel_key",
        "runs.model, runs.error, runs.surface_ref, runs.owner",
        *(
            f"CASE WHEN runs.outcome = 'running' THEN (SELECT COALESCE(SUM(l.{column}), 0) "
            f"FROM usage_ledger l WHERE l.run_id = runs.id) ELSE runs.{column} END"
            for column in (
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "cost_usd",
            )
        ),
    ]
)
_UPSERT_CONVERSATION = (
    "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET key = excluded.key "
    f"RETURNING {rows.CONVERSATION_COLUMNS}"
)


def _ids(values: Iterable[Any]) -> str:
    """A JSON array for `json_each(?)`: one parameter, whatever the count."""
    return json.dumps(list(values), separators=(",", ":"))


def _message_row(
    conversation_id: int,
    seq: int,
    message: Message,
    body_json: str,
    run_id: int | None,
    now: float,
) -> tuple[Any, ...]:
    author_id = author_name = platform_message_id = None
    if isinstance(message, UserMessage):
        platform_message_id = message.platform_message_id
        if message.author is not None:
            author_id, author_name = message.author.id, message.author.name
    return (
        conversation_id,
        seq,
        message.role,
        author_id,
        author_name,
        platform_message_id,
        run_id,
        now,
        body_json,
    )


async def _fetchall(db: Db, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """One statement, its rows: one round trip."""
    return list(await db.execute_fetchall(sql, params))


async def _together(*steps: Awaitable[Any]) -> list[Any]:
    """Hand the driver every statement at once, in order: one round trip for all of them
    (each is queued when its task first runs, and tasks first run in the order made). The
    first exception is raised once every statement has finished."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def _fetchone(db: Db, sql: str, params: Sequence[Any] = ()) -> Any:
    found = await _fetchall(db, sql, params)
    return found[0] if found else None


async def _conversation_last_seqs(db: Db, conversation_ids: Iterable[int]) -> dict[int, int]:
    found = await _fetchall(
        db,
        "SELECT id, last_seq FROM conversations WHERE id IN (SELECT value FROM json_each(?))",
        (_ids(set(conversation_ids)),),
    )
    return {int(row[0]): int(row[1]) for row in found}


async def _known_runs(db: Db, run_ids: set[int]) -> set[int]:
    if not run_ids:
        return set()
    found = await _fetchall(
        db, "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?))", (_ids(run_ids),)
    )
    return {int(row[0]) for row in found}


def _one_of(
    many: Callable[[Db, list[Any]], Awaitable[Sequence[Any]]],
) -> Callable[[Db, Any], Awaitable[Any]]:
    """A set-oriented operation applied to one call (for a lone call or a retried batch)."""

    async def one(db: Db, arg: Any) -> Any:
        [outcome] = await many(db, [arg])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return one


class _SqliteTransactions:
    """The batcher's transaction statements, on SQLite."""

    async def begin(self, db: Db) -> None:
        # Takes the write lock before anything is read: a second process waits on
        # busy_timeout (on the driver's thread) instead of failing on a stale snapshot.
        await db.execute("BEGIN IMMEDIATE")

    async def commit(self, db: Db) -> None:
        await db.execute("COMMIT")

    async def rollback(self, db: Db) -> None:
        with contextlib.suppress(sqlite3.OperationalError):  # SQLite may have ended it itself
            await db.execute("ROLLBACK")

    async def savepoint(self, db: Db) -> None:
        await db.execute("SAVEPOINT store_call")

    async def release(self, db: Db) -> None:
        await db.execute("RELEASE store_call")

    async def rollback_to(self, db: Db) -> None:
        await db.execute("ROLLBACK TO store_call")
        await db.execute("RELEASE store_call")


# --- the write operations: what a call carries, and its statements --------------------------


@dataclass(frozen=True, slots=True)
class _Append:
    conversation_id: int
    message: Message
    body_json: str
    run_id: int | None
    usage: Usage | None  # charged: a reply's usage, recorded in the same transaction
    model: str | None
    now: float


async def _append_lone(db: Db, call: _Append) -> StoredMessage:
    found = await _fetchone(
        db,
        _APPEND_MESSAGE,
        (
            *_message_row(0, 0, call.message, call.body_json, call.run_id, call.now)[2:],
            call.conversation_id,
        ),
    )
    if found is None:
        raise KeyError(f"no conversation with id {call.conversation_id}")
    return StoredMessage(seq=int(found[0]), message=call.message)


async def _append_many(db: Db, calls: list[_Append]) -> list[StoredMessage | Exception]:
    # One round trip: the ledger entries, the messages (each INSERT takes the next seq; one
    # whose run is unknown is not inserted), then the lookups that tell which went in.
    ledger = [_usage_row(c.run_id, c.usage, c.model, c.now) for c in calls if c.usage]
    run_ids = {c.run_id for c in calls if c.usage is not None and c.run_id is not None}
    steps: list[Awaitable[Any]] = []
    if ledger:
        steps.append(db.executemany(_RECORD_USAGE, ledger))
    steps.append(
        db.executemany(
            _APPEND_CHARGED,
            [
                (
                    *_message_row(0, 0, c.message, c.body_json, c.run_id, c.now)[2:],
                    c.conversation_id,
                    c.usage is not None,
                    c.run_id,
                )
                for c in calls
            ],
        )
    )
    steps.append(_conversation_last_seqs(db, {c.conversation_id for c in calls}))
    steps.append(_known_runs(db, run_ids))
    *_writes, last_seq, runs = await _together(*steps)
    went_in: dict[int, list[_Append]] = {}
    for c in calls:
        if c.conversation_id in last_seq and (c.usage is None or c.run_id in runs):
            went_in.setdefault(c.conversation_id, []).append(c)
    seqs: dict[int, int] = {}  # by id(call): the k-th of n calls took last_seq - n + k
    for conversation_id, appended in went_in.items():
        first = last_seq[conversation_id] - len(appended) + 1
        seqs.update({id(c): first + k for k, c in enumerate(appended)})
    outcomes: list[StoredMessage | Exception] = []
    for c in calls:
        if c.usage is not None and c.run_id not in runs:  # as from record_usage: first
            outcomes.append(KeyError(f"no run with id {c.run_id}"))
        elif c.conversation_id not in last_seq:
            outcomes.append(KeyError(f"no conversation with id {c.conversation_id}"))
        else:
            outcomes.append(StoredMessage(seq=seqs[id(c)], message=c.message))
    return outcomes


def _usage_row(run_id: int | None, usage: Usage, model: str | None, now: float) -> tuple[Any, ...]:
    return (
        model,
        now,
        usage.input,
        usage.output,
        usage.cache_read,
        usage.cache_write,
        usage.cost,
        run_id,
    )


APPEND: Op[Db, _Append, StoredMessage] = Op(
    "append_message", one=_one_of(_append_many), lone=_append_lone, many=_append_many
)
APPEND_CHARGED: Op[Db, _Append, StoredMessage] = Op(
    "append_message+usage", one=_one_of(_append_many), many=_append_many
)


@dataclass(frozen=True, slots=True)
class _Usage:
    run_id: int
    usage: Usage
    model: str | None
    now: float


async def _usage_lone(db: Db, call: _Usage) -> None:
    cursor = await db.execute(
        _RECORD_USAGE, _usage_row(call.run_id, call.usage, call.model, call.now)
    )
    if cursor.rowcount != 1:
        raise KeyError(f"no run with id {call.run_id}")


async def _usage_many(db: Db, calls: list[_Usage]) -> list[Exception | None]:
    runs = await _known_runs(db, {c.run_id for c in calls})
    known = [c for c in calls if c.run_id in runs]
    if known:
        await db.executemany(
            _RECORD_USAGE, [_usage_row(c.run_id, c.usage, c.model, c.now) for c in known]
        )
    return [None if c.run_id in runs else KeyError(f"no run with id {c.run_id}") for c in calls]


RECORD_USAGE: Op[Db, _Usage, None] = Op(
    "record_usage", one=_usage_lone, lone=_usage_lone, many=_usage_many
)


async def _claim_lone(db: Db, call: tuple[str, float]) -> bool:
    found = await _fetchall(
        db,
        "INSERT INTO deliveries (id, claimed_at) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING 1",
        call,
    )
    return bool(found)


async def _claim_many(db: Db, calls: list[tuple[str, float]]) -> list[bool]:
    claimed = {
        str(row[0])
        for row in await _fetchall(
            db,
            "INSERT INTO deliveries (id, claimed_at) SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]') FROM json_each(?) WHERE true ON CONFLICT DO NOTHING "
            "RETURNING id",
            (_ids(calls),),
        )
    }
    outcomes = []
    for delivery_id, _now in calls:  # an id claimed twice in one batch: the first call wins
        outcomes.append(delivery_id in claimed)
        claimed.discard(delivery_id)
    return outcomes


CLAIM: Op[Db, tuple[str, float], bool] = Op(
    "claim_delivery", one=_claim_lone, lone=_claim_lone, many=_claim_many
)


async def _conversations_many(
    db: Db, calls: list[tuple[str, str, str | None, float]]
) -> list[Conversation]:
    _inserted, found = await _together(
        db.execute(
            "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
            "json_extract(value, '$[2]'), json_extract(value, '$[3]'), "
            "json_extract(value, '$[3]') FROM json_each(?) WHERE true "
            "ON CONFLICT (key) DO NOTHING",
            (_ids(calls),),
        ),
        _fetchall(
            db,
            f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations "
            "WHERE key IN (SELECT json_extract(value, '$[0]') FROM json_each(?))",
            (_ids(calls),),
        ),
    )
    by_key = {str(row[1]): rows.conversation_from(row) for row in found}
    return [by_key[call[0]] for call in calls]


async def _conversation_lone(db: Db, call: tuple[str, str, str | None, float]) -> Conversation:
    key, channel_key, title, now = call
    row = await _fetchone(db, _UPSERT_CONVERSATION, (key, channel_key, title, now, now))
    return rows.conversation_from(row)


GET_OR_CREATE: Op[Db, tuple[str, str, str | None, float], Conversation] = Op(
    "get_or_create_conversation",
    one=_conversation_lone,
    lone=_conversation_lone,
    many=_conversations_many,
)


# --- delivering inbox items (deliver, start_run, accept's siblings) --------------------------


@dataclass(frozen=True, slots=True)
class _Delivery:
    conversation_id: int
    item_ids: list[int]
    known: dict[int, Message]  # messages this store still holds: not parsed again


# Deliver one item in its turn: the next seq, taken when it runs; only if still pending; only
# if every item of its call is that conversation's (else the call writes nothing at all).
_DELIVER_ITEM = (
    "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, run_id = ?, "
    "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
    "WHERE id = ? AND conversation_id = ? AND state = 'pending' AND (SELECT COUNT(*) FROM inbox "
    "WHERE id IN (SELECT value FROM json_each(?)) AND conversation_id = ?) = ?"
)
_INBOX_STATE = (
    "SELECT id, conversation_id, state, body, seq FROM inbox "
    "WHERE id IN (SELECT value FROM json_each(?))"
)


def _delivery_rows(delivery: _Delivery, run_id: int | None, now: float) -> list[tuple[Any, ...]]:
    cid, ids = delivery.conversation_id, delivery.item_ids
    everyone = (_ids(ids), cid, len(set(ids)))
    return [(now, run_id, item_id, cid, *everyone) for item_id in ids]


async def _inbox_state(db: Db, item_ids: set[int]) -> dict[int, tuple[int, str, str | None, Any]]:
    found = await _fetchall(db, _INBOX_STATE, (_ids(item_ids),)) if item_ids else []
    return {int(row[0]): (int(row[1]), str(row[2]), row[3], row[4]) for row in found}


def _refusal(
    delivery: _Delivery, before: dict[int, tuple[int, str, str | None, Any]]
) -> KeyError | None:
    """Why a delivery writes nothing: an item that is not its conversation's."""
    cid = delivery.conversation_id
    foreign = [i for i in delivery.item_ids if i not in before or before[i][0] != cid]
    return KeyError(f"no inbox item {foreign[0]} in conversation {cid}") if foreign else None


def _delivered(
    deliveries: list[_Delivery],
    before: dict[int, tuple[int, str, str | None, Any]],
    after: dict[int, tuple[int, str, str | None, Any]],
) -> list[list[StoredMessage] | KeyError]:
    """What each delivery did, from its items before and after: the items pending before,
    in its order (an item in two deliveries went to the first), or a KeyError."""
    outcomes: list[list[StoredMessage] | KeyError] = []
    taken: set[int] = set()
    for delivery in deliveries:
        refused = _refusal(delivery, before)
        if refused is not None:
            outcomes.append(refused)
            continue
        stored: list[StoredMessage] = []
        for item_id in delivery.item_ids:
            _conversation, state, body_json, _seq = before[item_id]
            if state != "pending" or item_id in taken:  # settled before, or given twice
                continue
            taken.add(item_id)
            assert body_json is not None  # a pending item keeps its body
            message = delivery.known.get(item_id)
            if message is None:
                message = load_message(body_json)
            stored.append(StoredMessage(seq=int(after[item_id][3]), message=message))
        outcomes.append(stored)
    return outcomes


@dataclass(frozen=True, slots=True)
class _Deliver:
    delivery: _Delivery
    run_id: int | None
    now: float


async def _deliver_many(db: Db, calls: list[_Deliver]) -> list[list[StoredMessage] | Exception]:
    # One round trip: the items before, every item delivered in its turn, the items after.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    rows_ = [row for c in calls for row in _delivery_rows(c.delivery, c.run_id, c.now)]
    before, _updated, after = await _together(
        _inbox_state(db, wanted), db.executemany(_DELIVER_ITEM, rows_), _inbox_state(db, wanted)
    )
    return list(_delivered([c.delivery for c in calls], before, after))


async def _deliver_lone(db: Db, call: _Deliver) -> list[StoredMessage]:
    """One item whose message this store holds: ONE statement (the trigger appends it)."""
    [(item_id, message)] = call.delivery.known.items()
    cid = call.delivery.conversation_id
    found = await _fetchone(
        db,
        "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, run_id = ?, "
        "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
        "WHERE id = ? AND conversation_id = ? AND state = 'pending' RETURNING seq",
        (call.now, call.run_id, item_id, cid),
    )
    if found is not None:
        return [StoredMessage(seq=int(found[0]), message=message)]
    # Settled before (nothing to do), or not this conversation's.
    if await _fetchone(
        db, "SELECT 1 FROM inbox WHERE id = ? AND conversation_id = ?", (item_id, cid)
    ):
        return []
    raise KeyError(f"no inbox item {item_id} in conversation {cid}")


DELIVER: Op[Db, _Deliver, list[StoredMessage]] = Op(
    "deliver", one=_one_of(_deliver_many), many=_deliver_many
)
DELIVER_KNOWN_ONE: Op[Db, _Deliver, list[StoredMessage]] = Op(
    "deliver one", one=_one_of(_deliver_many), lone=_deliver_lone, many=_deliver_many
)


@dataclass(frozen=True, slots=True)
class _StartRun:
    conversation_id: int
    user_id: str | None
    channel_key: str | None
    model: str | None
    surface_json: str
    owner_json: str
    delivery: _Delivery
    now: float


_INSERT_RUN_SELECT = (
    "SELECT id, 'running', ?, ?, COALESCE(?, channel_key), ?, ?, ? FROM conversations WHERE id = ?"
)
_RUN_COLUMNS_INSERTED = (
    "conversation_id, outcome, started_at, user_id, channel_key, model, surface_ref, owner"
)


def _started(call: _StartRun, run_id: int, key: str, channel_key: str) -> RunRecord:
    # A new run has no ledger entries yet: its usage is zero without asking.
    return RunRecord(
        id=run_id,
        conversation_id=call.conversation_id,
        conversation_key=key,
        outcome="running",
        started_at=call.now,
        finished_at=None,
        user_id=call.user_id,
        channel_key=channel_key,
        model=call.model,
        usage=Usage(),
        error=None,
        surface_ref=json.loads(call.surface_json),
        owner=json.loads(call.owner_json),
    )


def _run_params(call: _StartRun) -> tuple[Any, ...]:
    return (
        call.now,
        call.user_id,
        call.channel_key,
        call.model,
        call.surface_json,
        call.owner_json,
        call.conversation_id,
    )


async def _start_run_lone(db: Db, call: _StartRun) -> RunRecord:
    row = await _fetchone(
        db,
        f"INSERT INTO runs ({_RUN_COLUMNS_INSERTED}) {_INSERT_RUN_SELECT} RETURNING id, "
        "channel_key, (SELECT key FROM conversations WHERE conversations.id = conversation_id)",
        _run_params(call),
    )
    if row is None:
        raise KeyError(f"no conversation with id {call.conversation_id}")
    return _started(call, int(row[0]), str(row[2]), str(row[1]))


async def _start_run_many(db: Db, calls: list[_StartRun]) -> list[RunRecord | Exception]:
    # Round trip 1: the lookups, and every run whose conversation and items are all known
    # (one INSERT; ids grow in insertion order, the calls' order). Round trip 2: deliveries.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    runs_json = _ids(
        [*_run_params(c), _ids(c.delivery.item_ids), len(set(c.delivery.item_ids))] for c in calls
    )
    found, before, inserted = await _together(
        _fetchall(
            db,
            "SELECT id, key, channel_key FROM conversations "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (_ids({c.conversation_id for c in calls}),),
        ),
        _inbox_state(db, wanted),
        _fetchall(
            db,
            f"INSERT INTO runs ({_RUN_COLUMNS_INSERTED}) "
            "SELECT c.id, 'running', json_extract(j.value, '$[0]'), "
            "json_extract(j.value, '$[1]'), "
            "COALESCE(json_extract(j.value, '$[2]'), c.channel_key), "
            "json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'), "
            "json_extract(j.value, '$[5]') FROM json_each(?) j "
            "JOIN conversations c ON c.id = json_extract(j.value, '$[6]') "
            "WHERE (SELECT COUNT(*) FROM inbox WHERE id IN "
            "(SELECT value FROM json_each(json_extract(j.value, '$[7]'))) "
            "AND conversation_id = c.id) = json_extract(j.value, '$[8]') "
            "ORDER BY j.key RETURNING id",
            (runs_json,),
        ),
    )
    conversations = {int(row[0]): (str(row[1]), str(row[2])) for row in found}
    known = [c for c in calls if c.conversation_id in conversations]
    refused = {id(c): r for c in known if (r := _refusal(c.delivery, before)) is not None}
    started = [c for c in known if id(c) not in refused]
    run_ids = {
        id(c): run_id
        for c, run_id in zip(started, sorted(int(row[0]) for row in inserted), strict=True)
    }
    delivering = [c for c in started if c.delivery.item_ids]
    if delivering:
        rows_ = [
            row for c in delivering for row in _delivery_rows(c.delivery, run_ids[id(c)], c.now)
        ]
        await db.executemany(_DELIVER_ITEM, rows_)
    outcomes: list[RunRecord | Exception] = []
    for c in calls:
        if c.conversation_id not in conversations:
            outcomes.append(KeyError(f"no conversation with id {c.conversation_id}"))
        elif id(c) in refused:
            outcomes.append(refused[id(c)])
        else:
            key, channel = conversations[c.conversation_id]
            channel = c.channel_key if c.channel_key is not None else channel
            outcomes.append(_started(c, run_ids[id(c)], key, channel))
    return outcomes


START_RUN: Op[Db, _StartRun, RunRecord] = Op(
    "start_run", one=_one_of(_start_run_many), lone=_start_run_lone, many=_start_run_many
)
START_RUN_DELIVERING: Op[Db, _StartRun, RunRecord] = Op(
    "start_run+deliver", one=_one_of(_start_run_many), many=_start_run_many
)


async def _finish_lone(db: Db, call: tuple[int, str, str | None, float]) -> RunRecord:
    run_id, outcome, error, now = call
    row = await _fetchone(
        db,
        "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
        "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = runs.id) "
        f"WHERE id = ? AND outcome = 'running' RETURNING {_RUN_FIELDS}",
        (outcome, error, now, run_id),
    )
    if row is None:  # finished before (the first finish wins), or unknown
        row = await _fetchone(db, f"SELECT {_RUN_FIELDS} FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise KeyError(f"no run with id {run_id}")
    return rows.run_record(row)


async def _finish_many(
    db: Db, calls: list[tuple[int, str, str | None, float]]
) -> list[RunRecord | Exception]:
    first: dict[int, tuple[int, str, str | None, float]] = {}
    for call in calls:  # a run finished twice in one batch: the first finish wins
        first.setdefault(call[0], call)
    # One round trip: every finish, then every run as it is now.
    _updated, found = await _together(
        db.execute(
            "UPDATE runs SET outcome = json_extract(j.value, '$[1]'), "
            "error = json_extract(j.value, '$[2]'), finished_at = json_extract(j.value, '$[3]'), "
            "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
            f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = runs.id) "
            "FROM json_each(?) j WHERE runs.id = json_extract(j.value, '$[0]') "
            "AND runs.outcome = 'running'",
            (_ids(first.values()),),
        ),
        _fetchall(
            db,
            f"SELECT {_RUN_FIELDS} FROM runs WHERE id IN (SELECT value FROM json_each(?))",
            (_ids(first),),
        ),
    )
    finished = {int(row[0]): rows.run_record(row) for row in found}
    return [finished.get(call[0]) or KeyError(f"no run with id {call[0]}") for call in calls]


FINISH_RUN: Op[Db, tuple[int, str, str | None, float], RunRecord] = Op(
    "finish_run", one=_finish_lone, lone=_finish_lone, many=_finish_many
)


# --- accepting a delivery into the inbox ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Accept:
    request: int  # unique per store: finds this call's outcome
    key: str
    channel_key: str
    title: str | None
    claims: list[str]
    delivery_id: str | None
    message: Message
    body_json: str
    ref_json: str
    backfill: list[tuple[Message, str]]
    now: float


_ACCEPT_ROWS = (
    "INSERT INTO teammate_accept SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), "
    "json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]'), "
    "json_extract(value, '$[8]'), json_extract(value, '$[9]') FROM json_each(?) ORDER BY key"
)
_ACCEPTED = (
    "DELETE FROM teammate_accepted RETURNING request, created, item_id, "
    "(SELECT json_array(id, key, channel_key, title, settings, created_at, updated_at) "
    "FROM conversations WHERE id = conversation_id)"
)


def _accept_row(call: _Accept) -> list[Any]:
    return [
        call.request,
        call.key,
        call.channel_key,
        call.title,
        _ids(call.claims),
        call.delivery_id,
        call.body_json,
        call.ref_json,
        call.now,
        _ids(json for _message, json in call.backfill),
    ]


async def _accept_lone(db: Db, call: _Accept) -> Accepted | None:
    # The accept is the first statement (one autocommit write); the second only reads and
    # clears its outcome from this connection's TEMP table.
    _inserted, accepted = await _together(
        db.execute(
            "INSERT INTO teammate_accept VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _accept_row(call)
        ),
        _accepted(db, [call]),
    )
    return accepted[0]  # type: ignore[no-any-return]


async def _accept_many(db: Db, calls: list[_Accept]) -> list[Accepted | None]:
    _inserted, accepted = await _together(
        db.execute(_ACCEPT_ROWS, (_ids(_accept_row(c) for c in calls),)), _accepted(db, calls)
    )
    return accepted  # type: ignore[no-any-return]


async def _accepted(db: Db, calls: list[_Accept]) -> list[Accepted | None]:
    outcomes = {int(row[0]): row for row in await _fetchall(db, _ACCEPTED)}
    results: list[Accepted | None] = []
    for call in calls:
        row = outcomes.get(call.request)
        if row is None:  # a repeat: the trigger skipped it
            results.append(None)
            continue
        conversation = rows.conversation_from(json.loads(row[3]))
        item = InboxItem(
            id=int(row[2]),
            conversation_id=conversation.id,
            message=call.message,
            surface_ref=json.loads(call.ref_json),
            received_at=call.now,
        )
        results.append(Accepted(conversation=conversation, item=item, created=bool(row[1])))
    return results


ACCEPT: Op[Db, _Accept, Accepted | None] = Op(
    "accept_delivery", one=_one_of(_accept_many), lone=_accept_lone, many=_accept_many
)


# --- the rarer writes: one statement (or a few) per call ------------------------------------


async def _update_conversation(
    db: Db, call: tuple[str | None, str | None, float, int]
) -> Conversation:
    row = await _fetchone(
        db,
        "UPDATE conversations SET title = COALESCE(?, title), settings = COALESCE(?, settings), "
        f"updated_at = ? WHERE id = ? RETURNING {rows.CONVERSATION_COLUMNS}",
        call,
    )
    if row is None:
        raise KeyError(f"no conversation with id {call[3]}")
    return rows.conversation_from(row)


UPDATE_CONVERSATION: Op[Db, tuple[str | None, str | None, float, int], Conversation] = Op(
    "update_conversation", one=_update_conversation, lone=_update_conversation
)


async def _prune(db: Db, cutoff: float) -> int:
    cursor = await db.execute("DELETE FROM deliveries WHERE claimed_at < ?", (cutoff,))
    return cursor.rowcount


PRUNE: Op[Db, float, int] = Op("prune_deliveries", one=_prune, lone=_prune)


async def _drop(db: Db, call: tuple[int, list[int], str, float]) -> None:
    conversation_id, item_ids, reason, now = call
    found = {
        int(row[0])
        for row in await _fetchall(
            db,
            "SELECT id FROM inbox WHERE conversation_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (conversation_id, _ids(item_ids)),
        )
    }
    for item_id in item_ids:
        if item_id not in found:
            raise KeyError(f"no inbox item {item_id} in conversation {conversation_id}")
    await db.execute(
        "UPDATE inbox SET state = 'dropped', settled_at = ?, reason = ? "
        "WHERE id IN (SELECT value FROM json_each(?)) AND state = 'pending'",
        (now, reason, _ids(item_ids)),
    )


DROP: Op[Db, tuple[int, list[int], str, float], None] = Op("drop", one=_drop)


async def _surface_ref(db: Db, call: tuple[str, int]) -> RunRecord:
    row = await _fetchone(
        db, f"UPDATE runs SET surface_ref = ? WHERE id = ? RETURNING {_RUN_FIELDS}", call
    )
    if row is None:
        raise KeyError(f"no run with id {call[1]}")
    return rows.run_record(row)


SURFACE_REF: Op[Db, tuple[str, int], RunRecord] = Op(
    "set_run_surface_ref", one=_surface_ref, lone=_surface_ref
)


@dataclass(frozen=True, slots=True)
class _Compaction:
    conversation_id: int
    summary: str
    up_to_seq: int
    details_json: str
    now: float


async def _compaction(db: Db, call: _Compaction) -> Compaction:
    row = await _fetchone(
        db,
        "INSERT INTO compactions (conversation_id, summary, up_to_seq, details, created_at) "
        "SELECT id, ?, ?, ?, ? FROM conversations WHERE id = ? AND ? BETWEEN 1 AND last_seq "
        "RETURNING id",
        (
            call.summary,
            call.up_to_seq,
            call.details_json,
            call.now,
            call.conversation_id,
            call.up_to_seq,
        ),
    )
    if row is None:
        found = await _fetchone(
            db, "SELECT last_seq FROM conversations WHERE id = ?", (call.conversation_id,)
        )
        if found is None:
            raise KeyError(f"no conversation with id {call.conversation_id}")
        raise ValueError(
            f"up_to_seq {call.up_to_seq} is outside the conversation's messages 1..{int(found[0])}"
        )
    return Compaction(
        id=int(row[0]),
        conversation_id=call.conversation_id,
        summary=call.summary,
        up_to_seq=call.up_to_seq,
        created_at=call.now,
        details=json.loads(call.details_json),
    )


COMPACTION: Op[Db, _Compaction, Compaction] = Op(
    "add_compaction", one=_compaction, lone=_compaction
)


async def _feedback(db: Db, call: tuple[int, str, Vote | None, float]) -> FeedbackTally:
    run_id, user_id, vote, now = call
    if await _fetchone(db, "SELECT 1 FROM runs WHERE id = ?", (run_id,)) is None:
        raise KeyError(f"no run {run_id}")
    if vote is None:
        await db.execute(
            "DELETE FROM run_feedback WHERE run_id = ? AND user_id = ?", (run_id, user_id)
        )
    else:
        await db.execute(
            "INSERT INTO run_feedback (run_id, user_id, vote, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (run_id, user_id) DO UPDATE SET vote = excluded.vote, at = excluded.at",
            (run_id, user_id, vote, now),
        )
    up, down = await _fetchone(
        db,
        "SELECT COALESCE(SUM(vote = 'up'), 0), COALESCE(SUM(vote = 'down'), 0) "
        "FROM run_feedback WHERE run_id = ?",
        (run_id,),
    )
    return FeedbackTally(up=int(up), down=int(down))


FEEDBACK: Op[Db, tuple[int, str, Vote | None, float], FeedbackTally] = Op(
    "set_run_feedback", one=_feedback
)


async def _channel_config(db: Db, call: tuple[str, str, str | None, float]) -> None:
    await db.execute(
        "INSERT INTO channel_config (channel_key, config, updated_by, updated_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (channel_key) DO UPDATE SET "
        "config = excluded.config, updated_by = excluded.updated_by, "
        "updated_at = excluded.updated_at",
        call,
    )


CHANNEL_CONFIG: Op[Db, tuple[str, str, str | None, float], None] = Op(
    "set_channel_config", one=_channel_config, lone=_channel_config
)


# --- reads: many at once where the runner makes many ----------------------------------------


class _NoTransactions:
    """Reads need no transaction: each statement sees what was committed when it ran."""

    async def begin(self, db: Db) -> None:
        return None

    async def commit(self, db: Db) -> None:
        return None

    async def rollback(self, db: Db) -> None:
        return None

    async def savepoint(self, db: Db) -> None:
        return None

    async def release(self, db: Db) -> None:
        return None

    async def rollback_to(self, db: Db) -> None:
        return None


async def _read_one(db: Db, body: Callable[[Db], Awaitable[Any]]) -> Any:
    return await body(db)


async def _read_many(db: Db, bodies: list[Callable[[Db], Awaitable[Any]]]) -> list[Any]:
    """Unrelated reads: all handed to the driver at once; each caller gets its own error."""
    results = await asyncio.gather(*(body(db) for body in bodies), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    return results


READ: Op[Db, Callable[[Db], Awaitable[Any]], Any] = Op(
    "read", one=_read_one, lone=_read_one, many=_read_many
)

# Every conversation's head (its row and latest compaction, as one JSON array) and the
# messages after that compaction, in ONE statement: one snapshot, one round trip.
_LOAD = (
    "WITH w AS (SELECT DISTINCT value AS cid FROM json_each(?)), "
    "k AS (SELECT cid, (SELECT id FROM compactions WHERE conversation_id = cid "
    "ORDER BY id DESC LIMIT 1) AS kid FROM w) "
    'SELECT k.cid, 0, NULL AS "body [teammate_message]", json_array(c.id, c.key, '
    "c.channel_key, c.title, c.settings, c.created_at, c.updated_at, p.id, p.summary, "
    "p.up_to_seq, p.details, p.created_at) FROM k JOIN conversations c ON c.id = k.cid "
    "LEFT JOIN compactions p ON p.id = k.kid "
    "UNION ALL SELECT m.conversation_id, m.seq, m.body, NULL FROM k JOIN messages m "
    "ON m.conversation_id = k.cid AND m.seq > "
    "COALESCE((SELECT up_to_seq FROM compactions WHERE id = k.kid), 0) ORDER BY 1, 2"
)


async def _load_many(db: Db, conversation_ids: list[int]) -> list[LoadedConversation | KeyError]:
    # Parsing thousands of messages (on the driver's thread, as they are fetched) creates
    # objects faster than the cyclic GC's thresholds expect; its repeated passes over a big
    # heap would more than double a long load. Nothing here forms cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = await _fetchall(db, _LOAD, (_ids(conversation_ids),))
    finally:
        if was_enabled:
            gc.enable()
    heads: dict[int, tuple[Conversation, Compaction | None]] = {}
    messages: dict[int, list[StoredMessage]] = {}
    for cid, seq, message, head in found:
        if head is None:
            messages[cid].append(StoredMessage(seq=int(seq), message=message))
            continue
        fields = json.loads(head)
        compaction = None
        if fields[7] is not None:
            compaction = Compaction(
                id=int(fields[7]),
                conversation_id=int(cid),
                summary=str(fields[8]),
                up_to_seq=int(fields[9]),
                created_at=float(fields[11]),
                details=json.loads(fields[10]),
            )
        heads[cid] = (rows.conversation_from(fields), compaction)
        messages[cid] = []
    return [
        LoadedConversation(heads[cid][0], heads[cid][1], messages[cid])
        if cid in heads
        else KeyError(f"no conversation with id {cid}")
        for cid in conversation_ids
    ]


LOAD: Op[Db, int, LoadedConversation] = Op(
    "load", one=_one_of(_load_many), lone=_one_of(_load_many), many=_load_many
)


async def _channel_configs(db: Db, keys: list[str]) -> list[dict[str, Any] | None]:
    found = await _fetchall(
        db,
        "SELECT channel_key, config FROM channel_config "
        "WHERE channel_key IN (SELECT value FROM json_each(?))",
        (_ids(set(keys)),),
    )
    configs = {str(key): rows.load_json_object(config) for key, config in found}
    return [configs.get(key) for key in keys]


CHANNEL_CONFIG_READ: Op[Db, str, dict[str, Any] | None] = Op(
    "get_channel_config",
    one=_one_of(_channel_configs),
    lone=_one_of(_channel_configs),
    many=_channel_configs,
)


# --- the store -------------------------------------------------------------------------------


def _connect(path: str, busy_timeout_s: float, setup: Callable[[sqlite3.Connection], None]) -> Db:
    """An aiosqlite connection whose sqlite3 connection runs `setup` on the driver's thread
    as it is made (checks, pragmas, migrations: synchronous, as `storage.migrations` is)."""

    class Connection(sqlite3.Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            try:
                setup(self)
            except BaseException:
                self.close()
                raise

    return aiosqlite.connect(
        path,
        timeout=busy_timeout_s,
        isolation_level=None,  # autocommit: every transaction here is explicit
        detect_types=sqlite3.PARSE_COLNAMES,
        cached_statements=256,
        factory=Connection,
    )


class AioSqliteStore:
    """Persisted conversations in one SQLite file, on aiosqlite. Open with `open(path)`:

        async with AioSqliteStore.open("teammate.db") as store: ...
        store = await AioSqliteStore.open("teammate.db")  # then: await store.close()

    Methods given an unknown conversation or run id raise `KeyError`.
    """

    def __init__(self, writer: Db, reader: Db | None, path: str, clock: Clock) -> None:
        # Use `open()`: it checks the file, sets the pragmas, migrates and connects.
        self._writer = writer
        self._reader = reader  # None for ":memory:": reads queue with the writes
        self._batcher: Batcher[Db] = Batcher(writer, _SqliteTransactions())
        # Reads batch the same way on their own connection, with no transaction to open.
        self._readers = None if reader is None else Batcher(reader, _NoTransactions())
        self._path = path
        self._clock = clock
        self._closed = False
        # Messages this process accepted and has not yet delivered or dropped, by inbox item id
        # (with their conversation): `deliver` hands back the very object accepted instead of
        # parsing it again. Bounded; a miss (a restart, eviction) parses the stored body.
        self._accepted: dict[int, tuple[int, Message]] = {}
        self._requests = itertools.count(1)
        # Unclosed and forgotten: stop the drivers' threads instead of leaking them.
        connections = [c for c in (writer, reader) if c is not None]
        self._finalizer = weakref.finalize(self, _stop_all, connections)

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
    ) -> AioSqliteStore:
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
            for statement in [_LAST_SEQ_TRIGGER, _DELIVER_TRIGGER, *_ACCEPT_SETUP]:
                db.execute(statement)

        def setup_reader(db: sqlite3.Connection) -> None:
            db.execute(f"PRAGMA busy_timeout = {busy_ms:d}")
            db.execute("PRAGMA query_only = ON")  # this connection never writes

        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        writer = await _connect(path, busy_timeout_s, setup_writer)
        reader: Db | None = None
        try:
            if path != ":memory:":
                reader = await _connect(path, busy_timeout_s, setup_reader)
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
                found = await _fetchall(db, f"PRAGMA integrity_check({limit:d})")
                problems = [str(row[0]) for row in found if str(row[0]) != "ok"]
                orphans = (await _fetchall(db, "PRAGMA foreign_key_check"))[:limit]
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
        self._finalizer.detach()
        await self._batcher.drain()
        if self._readers is not None:
            await self._readers.drain()
        await self._writer.close()
        if self._reader is not None:
            await self._reader.close()

    async def __aenter__(self) -> AioSqliteStore:
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
            row = await _fetchone(
                db, f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = ?", (key,)
            )
            return None if row is None else rows.conversation_from(row)

        return await self._read(body)

    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""

        async def body(db: Db) -> list[Conversation]:
            found = await _fetchall(
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
        call = _Append(
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
            return await _messages_after(db, conversation_id, seq)

        return await self._read(body)

    async def message_count(self, conversation_id: int) -> int:
        async def body(db: Db) -> int:
            row = await _fetchone(
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
        call = _Accept(
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
            found = await _fetchall(
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
            found = await _fetchall(
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
        delivery = _Delivery(conversation_id, ids, self._known(conversation_id, ids))
        one_known = len(ids) == 1 and len(delivery.known) == 1
        call = _Deliver(delivery, run_id, self._clock())
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
        call = _StartRun(
            conversation_id=conversation_id,
            user_id=user_id,
            channel_key=channel_key,
            model=model,
            surface_json=rows.dump_json(surface_ref or {}),
            owner_json=rows.dump_json(owner or {}),
            delivery=_Delivery(conversation_id, ids, self._known(conversation_id, ids)),
            now=self._clock(),
        )
        record = await self._write(START_RUN_DELIVERING if ids else START_RUN, call)
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
            found = await _fetchall(
                db,
                f"SELECT {_RUN_FIELDS} FROM runs WHERE outcome = 'running' ORDER BY started_at, id",
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
        call = _Compaction(
            conversation_id, summary, up_to_seq, rows.dump_json(details or {}), self._clock()
        )
        return await self._write(COMPACTION, call)

    # --- usage ledger ---------------------------------------------------------------------

    async def record_usage(self, run_id: int, usage: Usage, *, model: str | None = None) -> None:
        """Add one model reply's usage, attributed to the run's conversation, user and channel."""
        await self._write(RECORD_USAGE, _Usage(run_id, usage, model, self._clock()))

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
            return rows.usage_of(await _fetchone(db, sql, params))

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
            row = await _fetchone(db, sql, params * 3)
            return UsageSummary(
                usage=rows.usage_of(row[:5]),
                runs=int(row[5]),
                votes_up=int(row[6]),
                votes_down=int(row[7]),
            )

        return await self._read(body)

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(self, run_id: int, user_id: str, vote: Vote | None) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        return await self._write(FEEDBACK, (run_id, user_id, vote, self._clock()))

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""
        return await self._read_op(CHANNEL_CONFIG_READ, channel_key)

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        await self._write(CHANNEL_CONFIG, (channel_key, config_json, by, self._clock()))


async def _messages_after(db: Db, conversation_id: int, seq: int) -> list[StoredMessage]:
    # Parsing thousands of messages creates objects faster than the cyclic GC's thresholds
    # expect; its repeated passes over a big heap would more than double the time of a long
    # load. Nothing here forms cycles, so the collector resumes once the rows are fetched.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = await _fetchall(
            db,
            'SELECT seq, body AS "body [teammate_message]" FROM messages '
            "WHERE conversation_id = ? AND seq > ? ORDER BY seq",
            (conversation_id, seq),
        )
    finally:
        if was_enabled:
            gc.enable()
    return [StoredMessage(seq=int(row[0]), message=row[1]) for row in found]


def _stop_all(connections: list[Db]) -> None:
    for connection in connections:
        connection.stop()


if TYPE_CHECKING:

    def _implements_the_contract(store: AioSqliteStore) -> ConversationStore:
        return store


class _Opening:
    """What `AioSqliteStore.open()` returns: await it for a store, or `async with` it."""

    def __init__(self, opening: Awaitable[AioSqliteStore]) -> None:
        self._opening = opening
        self._store: AioSqliteStore | None = None

    def __await__(self) -> Generator[Any, None, AioSqliteStore]:
        return self._opening.__await__()

    async def __aenter__(self) -> AioSqliteStore:
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
