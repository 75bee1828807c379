"""The SQL of the SQLite store's writes, alone and in set-oriented batches, on aiosqlite.

Owns: each write as a `storage.batching.Op` (its statements alone, and for many calls at
once), the reads the runner makes many at once (loads, channel configuration), and the
writer connection's TEMP tables and triggers that let one statement do a whole call.
`storage/sqlite.py` owns the store, its connections and opening a file; `storage.rows` turns
rows into records (for both backends).

How a call stays one statement (docs/architecture.md, "Storage"):
- Appending is `INSERT INTO messages ... SELECT last_seq + 1 FROM conversations`; a TEMP
  trigger moves `conversations.last_seq` with each insert: no `COUNT(*)`, no scan, so message
  10,000 costs what message 10 does.
- Accepting is one `INSERT INTO teammate_accept ... RETURNING` (a TEMP table whose BEFORE
  trigger claims, creates, backfills and queues); delivering is one `UPDATE inbox` (a TEMP trigger
  appends the message at the seq it takes); starting a run that delivers one message (the
  runner's every answer) is one `INSERT INTO teammate_start ... RETURNING`. The TEMP objects
  live in the connection, never in the file: another program sees the plain schema.
- A batch's statements do not grow with its calls (`json_each` lookups, `executemany`,
  `RETURNING`), and those that do not need each other's results are handed to the driver
  together (`_together`): one round trip.
- Messages are parsed on the driver's thread as rows are fetched (an SQLite converter named
  by the column), not on the event loop.

Must not: open connections or transactions of its own; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiosqlite

from core.messages import Message, Usage, UserMessage, load_message
from storage import rows
from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    FeedbackTally,
    InboxItem,
    LoadedConversation,
    RunRecord,
    StoredMessage,
    Vote,
)
from storage.batching import Op

T = TypeVar("T")
Db = aiosqlite.Connection

# A column named `"x [teammate_message]"` is parsed into a `Message` as it is fetched.
sqlite3.register_converter("teammate_message", load_message)

LAST_SEQ_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_last_seq AFTER INSERT ON main.messages BEGIN "
    "UPDATE conversations SET last_seq = NEW.seq, updated_at = NEW.created_at "
    "WHERE id = NEW.conversation_id AND last_seq < NEW.seq; END"
)
# A message's queryable columns, from its stored JSON (as `_message_row` takes them from it).
_FROM_JSON = (
    "json_extract({0}, '$.role'), json_extract({0}, '$.author.id'), "
    "json_extract({0}, '$.author.name'), json_extract({0}, '$.platform_message_id')"
)
# Accepting a delivery is ONE statement, `INSERT INTO teammate_accept ... RETURNING` (one row
# per call), so a call alone is one autocommit statement and a batch of them is one statement
# too. Per row, a BEFORE trigger: a repeat (any id claimed before, by another call or an
# earlier row) is skipped whole (no row returned); else the ids are claimed, the conversation
# made if missing, the backfill stored if nothing was ever said there, the message queued, and
# the outcome noted in `teammate_accepted` for the RETURNING clause to read.
ACCEPT_SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS teammate_accept (request INTEGER, conversation_key, "
    "channel_key, title, claims, delivery_id, body, surface_ref, received_at, backfill)",
    "CREATE TEMP TABLE IF NOT EXISTS teammate_accepted "
    "(request INTEGER PRIMARY KEY, conversation_id INTEGER, created INTEGER, item_id INTEGER)",
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_accept_one BEFORE INSERT ON teammate_accept "
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
    # The statement's RETURNING has read the outcome by then: nothing is kept.
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_accept_done AFTER INSERT ON teammate_accept "
    "BEGIN DELETE FROM teammate_accept WHERE rowid = NEW.rowid; "
    "DELETE FROM teammate_accepted WHERE request = NEW.request; END",
]
# Starting a run that delivers ONE inbox item (what the runner does for nearly every answer)
# is ONE statement, `INSERT INTO teammate_start ... RETURNING`: its BEFORE trigger skips the
# row whole (nothing written, no row returned) unless the item is that conversation's, else
# inserts the run, notes its id for the RETURNING clause, and delivers the item if it is
# still pending (the deliver trigger appends the message at the seq it takes).
START_SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS teammate_start (request INTEGER, conversation_id, "
    "started_at, user_id, channel_key, model, surface_ref, owner, item_id)",
    "CREATE TEMP TABLE IF NOT EXISTS teammate_started (request INTEGER PRIMARY KEY, run_id)",
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_start_one BEFORE INSERT ON teammate_start "
    "BEGIN "
    "SELECT RAISE(IGNORE) WHERE NOT EXISTS (SELECT 1 FROM inbox "
    "WHERE id = NEW.item_id AND conversation_id = NEW.conversation_id); "
    "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, model, "
    "surface_ref, owner) SELECT id, 'running', NEW.started_at, NEW.user_id, "
    "COALESCE(NEW.channel_key, channel_key), NEW.model, NEW.surface_ref, NEW.owner "
    "FROM conversations WHERE id = NEW.conversation_id; "
    "INSERT INTO teammate_started (request, run_id) VALUES (NEW.request, last_insert_rowid()); "
    "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = NEW.started_at, "
    "run_id = (SELECT run_id FROM teammate_started WHERE request = NEW.request), "
    "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
    "WHERE id = NEW.item_id AND state = 'pending'; "
    "END",
    # The statement's RETURNING has read the run by then: nothing is kept.
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_start_done AFTER INSERT ON teammate_start "
    "BEGIN DELETE FROM teammate_start WHERE rowid = NEW.rowid; "
    "DELETE FROM teammate_started WHERE request = NEW.request; END",
]
# Delivering an inbox item is marking it delivered at its seq: the message enters history in
# the same statement.
DELIVER_TRIGGER = (
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
# A run as `rows.run_record` reads it; a running run's usage is its ledger so far, a
# finished one's was totalled at finish. Usable in SELECT ... FROM runs and in RETURNING.
RUN_FIELDS = ", ".join(
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


async def fetchall(db: Db, sql: str, params: Sequence[Any] = ()) -> list[Any]:
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


async def fetchone(db: Db, sql: str, params: Sequence[Any] = ()) -> Any:
    found = await fetchall(db, sql, params)
    return found[0] if found else None


async def _conversation_last_seqs(db: Db, conversation_ids: Iterable[int]) -> dict[int, int]:
    found = await fetchall(
        db,
        "SELECT id, last_seq FROM conversations WHERE id IN (SELECT value FROM json_each(?))",
        (_ids(set(conversation_ids)),),
    )
    return {int(row[0]): int(row[1]) for row in found}


async def _known_runs(db: Db, run_ids: set[int]) -> set[int]:
    if not run_ids:
        return set()
    found = await fetchall(
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


class SqliteTransactions:
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
class AppendCall:
    conversation_id: int
    message: Message
    body_json: str
    run_id: int | None
    usage: Usage | None  # charged: a reply's usage, recorded in the same transaction
    model: str | None
    now: float


async def _append_lone(db: Db, call: AppendCall) -> StoredMessage:
    params = _message_row(0, 0, call.message, call.body_json, call.run_id, call.now)[2:]
    found = await db.execute_fetchall(_APPEND_MESSAGE, (*params, call.conversation_id))
    for (seq,) in found:
        return StoredMessage(seq=int(seq), message=call.message)
    raise KeyError(f"no conversation with id {call.conversation_id}")


async def _append_many(db: Db, calls: list[AppendCall]) -> list[StoredMessage | Exception]:
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
    went_in: dict[int, list[AppendCall]] = {}
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


APPEND: Op[Db, AppendCall, StoredMessage] = Op(
    "append_message", one=_one_of(_append_many), lone=_append_lone, many=_append_many
)
APPEND_CHARGED: Op[Db, AppendCall, StoredMessage] = Op(
    "append_message+usage", one=_one_of(_append_many), many=_append_many
)


@dataclass(frozen=True, slots=True)
class UsageCall:
    run_id: int
    usage: Usage
    model: str | None
    now: float


async def _usage_lone(db: Db, call: UsageCall) -> None:
    cursor = await db.execute(
        _RECORD_USAGE, _usage_row(call.run_id, call.usage, call.model, call.now)
    )
    if cursor.rowcount != 1:
        raise KeyError(f"no run with id {call.run_id}")


async def _usage_many(db: Db, calls: list[UsageCall]) -> list[Exception | None]:
    runs = await _known_runs(db, {c.run_id for c in calls})
    known = [c for c in calls if c.run_id in runs]
    if known:
        await db.executemany(
            _RECORD_USAGE, [_usage_row(c.run_id, c.usage, c.model, c.now) for c in known]
        )
    return [None if c.run_id in runs else KeyError(f"no run with id {c.run_id}") for c in calls]


RECORD_USAGE: Op[Db, UsageCall, None] = Op(
    "record_usage", one=_usage_lone, lone=_usage_lone, many=_usage_many
)


async def _claim_lone(db: Db, call: tuple[str, float]) -> bool:
    found = await fetchall(
        db,
        "INSERT INTO deliveries (id, claimed_at) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING 1",
        call,
    )
    return bool(found)


async def _claim_many(db: Db, calls: list[tuple[str, float]]) -> list[bool]:
    claimed = {
        str(row[0])
        for row in await fetchall(
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
        fetchall(
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
    row = await fetchone(db, _UPSERT_CONVERSATION, (key, channel_key, title, now, now))
    return rows.conversation_from(row)


GET_OR_CREATE: Op[Db, tuple[str, str, str | None, float], Conversation] = Op(
    "get_or_create_conversation",
    one=_conversation_lone,
    lone=_conversation_lone,
    many=_conversations_many,
)


# --- delivering inbox items (deliver, start_run, accept's siblings) --------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
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


def _delivery_rows(delivery: Delivery, run_id: int | None, now: float) -> list[tuple[Any, ...]]:
    cid, ids = delivery.conversation_id, delivery.item_ids
    everyone = (_ids(ids), cid, len(set(ids)))
    return [(now, run_id, item_id, cid, *everyone) for item_id in ids]


async def _inbox_state(db: Db, item_ids: set[int]) -> dict[int, tuple[int, str, str | None, Any]]:
    found = await fetchall(db, _INBOX_STATE, (_ids(item_ids),)) if item_ids else []
    return {int(row[0]): (int(row[1]), str(row[2]), row[3], row[4]) for row in found}


def _refusal(
    delivery: Delivery, before: dict[int, tuple[int, str, str | None, Any]]
) -> KeyError | None:
    """Why a delivery writes nothing: an item that is not its conversation's."""
    cid = delivery.conversation_id
    foreign = [i for i in delivery.item_ids if i not in before or before[i][0] != cid]
    return KeyError(f"no inbox item {foreign[0]} in conversation {cid}") if foreign else None


def _delivered(
    deliveries: list[Delivery],
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
class DeliverCall:
    delivery: Delivery
    run_id: int | None
    now: float


async def _deliver_many(db: Db, calls: list[DeliverCall]) -> list[list[StoredMessage] | Exception]:
    # One round trip: the items before, every item delivered in its turn, the items after.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    rows_ = [row for c in calls for row in _delivery_rows(c.delivery, c.run_id, c.now)]
    before, _updated, after = await _together(
        _inbox_state(db, wanted), db.executemany(_DELIVER_ITEM, rows_), _inbox_state(db, wanted)
    )
    return list(_delivered([c.delivery for c in calls], before, after))


async def _deliver_lone(db: Db, call: DeliverCall) -> list[StoredMessage]:
    """One item whose message this store holds: ONE statement (the trigger appends it)."""
    [(item_id, message)] = call.delivery.known.items()
    cid = call.delivery.conversation_id
    found = await fetchone(
        db,
        "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, run_id = ?, "
        "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
        "WHERE id = ? AND conversation_id = ? AND state = 'pending' RETURNING seq",
        (call.now, call.run_id, item_id, cid),
    )
    if found is not None:
        return [StoredMessage(seq=int(found[0]), message=message)]
    # Settled before (nothing to do), or not this conversation's.
    if await fetchone(
        db, "SELECT 1 FROM inbox WHERE id = ? AND conversation_id = ?", (item_id, cid)
    ):
        return []
    raise KeyError(f"no inbox item {item_id} in conversation {cid}")


DELIVER: Op[Db, DeliverCall, list[StoredMessage]] = Op(
    "deliver", one=_one_of(_deliver_many), many=_deliver_many
)
DELIVER_KNOWN_ONE: Op[Db, DeliverCall, list[StoredMessage]] = Op(
    "deliver one", one=_one_of(_deliver_many), lone=_deliver_lone, many=_deliver_many
)


@dataclass(frozen=True, slots=True)
class StartRunCall:
    conversation_id: int
    user_id: str | None
    channel_key: str | None
    model: str | None
    surface_json: str
    owner_json: str
    delivery: Delivery
    now: float
    request: int = 0  # this store's number for the call (`teammate_start` rows)


_INSERT_RUN_SELECT = (
    "SELECT id, 'running', ?, ?, COALESCE(?, channel_key), ?, ?, ? FROM conversations WHERE id = ?"
)
_RUN_COLUMNS_INSERTED = (
    "conversation_id, outcome, started_at, user_id, channel_key, model, surface_ref, owner"
)


def _started(call: StartRunCall, run_id: int, key: str, channel_key: str) -> RunRecord:
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


def _run_params(call: StartRunCall) -> tuple[Any, ...]:
    return (
        call.now,
        call.user_id,
        call.channel_key,
        call.model,
        call.surface_json,
        call.owner_json,
        call.conversation_id,
    )


async def _start_run_lone(db: Db, call: StartRunCall) -> RunRecord:
    row = await fetchone(
        db,
        f"INSERT INTO runs ({_RUN_COLUMNS_INSERTED}) {_INSERT_RUN_SELECT} RETURNING id, "
        "channel_key, (SELECT key FROM conversations WHERE conversations.id = conversation_id)",
        _run_params(call),
    )
    if row is None:
        raise KeyError(f"no conversation with id {call.conversation_id}")
    return _started(call, int(row[0]), str(row[2]), str(row[1]))


async def _start_run_many(db: Db, calls: list[StartRunCall]) -> list[RunRecord | Exception]:
    # Round trip 1: the lookups, and every run whose conversation and items are all known
    # (one INSERT; ids grow in insertion order, the calls' order). Round trip 2: deliveries.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    runs_json = _ids(
        [*_run_params(c), _ids(c.delivery.item_ids), len(set(c.delivery.item_ids))] for c in calls
    )
    found, before, inserted = await _together(
        fetchall(
            db,
            "SELECT id, key, channel_key FROM conversations "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (_ids({c.conversation_id for c in calls}),),
        ),
        _inbox_state(db, wanted),
        fetchall(
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


_START_ONE = (
    "INSERT INTO teammate_start VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING "
    "(SELECT s.run_id FROM teammate_started s WHERE s.request = teammate_start.request), "
    "(SELECT json_array(c.key, c.channel_key) FROM conversations c "
    "WHERE c.id = teammate_start.conversation_id)"
)


async def _start_run_delivering_one(db: Db, call: StartRunCall) -> RunRecord:
    """A run delivering one item: ONE statement (`START_SETUP`'s triggers do the rest)."""
    [item_id] = call.delivery.item_ids
    row = await fetchone(
        db,
        _START_ONE,
        (
            call.request,
            call.conversation_id,
            call.now,
            call.user_id,
            call.channel_key,
            call.model,
            call.surface_json,
            call.owner_json,
            item_id,
        ),
    )
    if row is None:  # skipped whole: the item is not that conversation's (or unknown)
        if await fetchone(db, "SELECT 1 FROM conversations WHERE id = ?", (call.conversation_id,)):
            raise KeyError(f"no inbox item {item_id} in conversation {call.conversation_id}")
        raise KeyError(f"no conversation with id {call.conversation_id}")
    key, channel_key = json.loads(row[1])
    channel = call.channel_key if call.channel_key is not None else channel_key
    return _started(call, int(row[0]), str(key), str(channel))


START_RUN: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run", one=_one_of(_start_run_many), lone=_start_run_lone, many=_start_run_many
)
START_RUN_DELIVERING: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run+deliver", one=_one_of(_start_run_many), many=_start_run_many
)
START_RUN_DELIVERING_ONE: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run+deliver one",
    one=_one_of(_start_run_many),
    lone=_start_run_delivering_one,
    many=_start_run_many,
)


async def _finish_lone(db: Db, call: tuple[int, str, str | None, float]) -> RunRecord:
    run_id, outcome, error, now = call
    row = await fetchone(
        db,
        "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
        "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = runs.id) "
        f"WHERE id = ? AND outcome = 'running' RETURNING {RUN_FIELDS}",
        (outcome, error, now, run_id),
    )
    if row is None:  # finished before (the first finish wins), or unknown
        row = await fetchone(db, f"SELECT {RUN_FIELDS} FROM runs WHERE id = ?", (run_id,))
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
        fetchall(
            db,
            f"SELECT {RUN_FIELDS} FROM runs WHERE id IN (SELECT value FROM json_each(?))",
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
class AcceptCall:
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


_ACCEPT_OUTCOME = (
    "RETURNING request, (SELECT json_array(a.created, a.item_id, c.id, c.key, c.channel_key, "
    "c.title, c.settings, c.created_at, c.updated_at) FROM teammate_accepted a "
    "JOIN conversations c ON c.id = a.conversation_id WHERE a.request = teammate_accept.request)"
)
_ACCEPT_ONE = f"INSERT INTO teammate_accept VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {_ACCEPT_OUTCOME}"
_ACCEPT_ROWS = (
    "INSERT INTO teammate_accept SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), "
    "json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]'), "
    f"json_extract(value, '$[8]'), json_extract(value, '$[9]') FROM json_each(?) ORDER BY key "
    f"{_ACCEPT_OUTCOME}"
)


def _accept_row(call: AcceptCall) -> list[Any]:
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


async def _accept_lone(db: Db, call: AcceptCall) -> Accepted | None:
    return _accepted([call], await fetchall(db, _ACCEPT_ONE, _accept_row(call)))[0]


async def _accept_many(db: Db, calls: list[AcceptCall]) -> list[Accepted | None]:
    found = await fetchall(db, _ACCEPT_ROWS, (_ids(_accept_row(c) for c in calls),))
    return _accepted(calls, found)


def _accepted(calls: list[AcceptCall], found: list[Any]) -> list[Accepted | None]:
    """Each call's outcome from the rows returned (a repeat returned none)."""
    outcomes = {int(row[0]): json.loads(row[1]) for row in found}
    results: list[Accepted | None] = []
    for call in calls:
        fields = outcomes.get(call.request)
        if fields is None:
            results.append(None)
            continue
        conversation = rows.conversation_from(fields[2:])
        item = InboxItem(
            id=int(fields[1]),
            conversation_id=conversation.id,
            message=call.message,
            surface_ref=json.loads(call.ref_json),
            received_at=call.now,
        )
        results.append(Accepted(conversation=conversation, item=item, created=bool(fields[0])))
    return results


ACCEPT: Op[Db, AcceptCall, Accepted | None] = Op(
    "accept_delivery", one=_one_of(_accept_many), lone=_accept_lone, many=_accept_many
)


# --- the rarer writes: one statement (or a few) per call ------------------------------------


async def _update_conversation(
    db: Db, call: tuple[str | None, str | None, float, int]
) -> Conversation:
    row = await fetchone(
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
        for row in await fetchall(
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
    row = await fetchone(
        db, f"UPDATE runs SET surface_ref = ? WHERE id = ? RETURNING {RUN_FIELDS}", call
    )
    if row is None:
        raise KeyError(f"no run with id {call[1]}")
    return rows.run_record(row)


SURFACE_REF: Op[Db, tuple[str, int], RunRecord] = Op(
    "set_run_surface_ref", one=_surface_ref, lone=_surface_ref
)


@dataclass(frozen=True, slots=True)
class CompactionCall:
    conversation_id: int
    summary: str
    up_to_seq: int
    details_json: str
    now: float


async def _compaction(db: Db, call: CompactionCall) -> Compaction:
    row = await fetchone(
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
        found = await fetchone(
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


COMPACTION: Op[Db, CompactionCall, Compaction] = Op(
    "add_compaction", one=_compaction, lone=_compaction
)


# run id, user id, vote, now, and the channel the run must be of (None: any).
FeedbackCall = tuple[int, str, Vote | None, float, str | None]


async def _feedback(db: Db, call: FeedbackCall) -> FeedbackTally:
    run_id, user_id, vote, now, channel_key = call
    found = await fetchone(
        db,
        "SELECT 1 FROM runs WHERE id = ? AND (? IS NULL OR channel_key = ?)",
        (run_id, channel_key, channel_key),
    )
    if found is None:
        raise KeyError(f"no run {run_id}" + (f" in {channel_key}" if channel_key else ""))
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
    up, down = await fetchone(
        db,
        "SELECT COALESCE(SUM(vote = 'up'), 0), COALESCE(SUM(vote = 'down'), 0) "
        "FROM run_feedback WHERE run_id = ?",
        (run_id,),
    )
    return FeedbackTally(up=int(up), down=int(down))


FEEDBACK: Op[Db, FeedbackCall, FeedbackTally] = Op("set_run_feedback", one=_feedback)


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


class NoTransactions:
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
    "COALESCE((SELECT up_to_seq FROM compactions WHERE id = k.kid), 0)"
)


async def _load_many(db: Db, conversation_ids: list[int]) -> list[LoadedConversation | KeyError]:
    # Parsing thousands of messages (on the driver's thread, as they are fetched) creates
    # objects faster than the cyclic GC's thresholds expect; its repeated passes over a big
    # heap would more than double a long load. Nothing here forms cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = await fetchall(db, _LOAD, (_ids(conversation_ids),))
    finally:
        if was_enabled:
            gc.enable()
    # By conversation, head first, then messages by seq (no ORDER BY: SQLite would sort every
    # body; the rows arrive in order already, which is the cheapest input of a sort here).
    found.sort(key=lambda row: (row[0], row[1]))
    heads: dict[int, tuple[Conversation, Compaction | None]] = {}
    messages: dict[int, list[StoredMessage]] = {}
    for cid, seq, message, head in found:
        if head is None:
            messages[cid].append(StoredMessage(seq=int(seq), message=message))
            continue
        fields = json.loads(head)
        compaction = None
        if fields[7] is not None:
            compaction = rows.compaction_from(int(cid), fields[7:12])
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
    found = await fetchall(
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


async def messages_after_seq(db: Db, conversation_id: int, seq: int) -> list[StoredMessage]:
    # Parsing thousands of messages creates objects faster than the cyclic GC's thresholds
    # expect; its repeated passes over a big heap would more than double the time of a long
    # load. Nothing here forms cycles, so the collector resumes once the rows are fetched.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        found = await fetchall(
            db,
            'SELECT seq, body AS "body [teammate_message]" FROM messages '
            "WHERE conversation_id = ? AND seq > ? ORDER BY seq",
            (conversation_id, seq),
        )
    finally:
        if was_enabled:
            gc.enable()
    return [StoredMessage(seq=int(row[0]), message=row[1]) for row in found]
