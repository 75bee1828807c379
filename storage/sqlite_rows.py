"""Rows to records for the SQLite store, and the SQL several of its methods share.

Owns: turning rows into `storage.base` records (and records into column values), plus the
statements more than one store method runs inside its transaction (appending a message,
looking up a conversation, a run or inbox items). Every function runs on the store's database
thread, inside a transaction the caller opened.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

import gc
import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal, cast, get_args

from core.messages import Message, Usage, UserMessage, load_message
from storage.base import (
    Compaction,
    Conversation,
    InboxItem,
    RunOutcome,
    RunRecord,
    SchemaError,
    StoredMessage,
)

OUTCOMES: frozenset[str] = frozenset(get_args(RunOutcome))

CONVERSATION_COLUMNS = "id, key, channel_key, title, settings, created_at, updated_at"
RUN_COLUMNS = (
    "r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at, r.user_id, "
    "r.channel_key, r.model, r.error, r.surface_ref, r.owner"
)
USAGE_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_usd), 0.0)"
)


def dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def conversation_by(
    db: sqlite3.Connection, column: Literal["id", "key"], value: int | str
) -> Conversation | None:
    row = db.execute(
        f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE {column} = ?", (value,)
    ).fetchone()
    return None if row is None else conversation_from(row)


def conversation_from(row: Sequence[Any]) -> Conversation:
    """A row that starts with `CONVERSATION_COLUMNS`."""
    return Conversation(
        id=int(row[0]),
        key=str(row[1]),
        channel_key=str(row[2]),
        title=row[3],
        settings=json.loads(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
    )


def append_message(
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


def inbox_rows(
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


def inbox_item(conversation_id: int, row: Sequence[Any]) -> InboxItem:
    """An inbox row as `(id, body, surface_ref, received_at)`."""
    return InboxItem(
        id=int(row[0]),
        conversation_id=conversation_id,
        message=load_message(row[1]),
        surface_ref=json.loads(row[2]),
        received_at=float(row[3]),
    )


def deliver_items(
    db: sqlite3.Connection,
    conversation_id: int,
    item_ids: list[int],
    known: dict[int, Message],
    run_id: int | None,
    now: float,
) -> list[StoredMessage]:
    """Append pending inbox items to history in the order given and mark them delivered;
    settled ones are skipped. `known`: messages already in memory, so they are not parsed
    again. KeyError (before anything is written) unless every item is this conversation's."""
    items = inbox_rows(db, conversation_id, item_ids)
    stored: list[StoredMessage] = []
    for item_id in item_ids:
        state, body_json = items[item_id]
        if state != "pending":
            continue
        assert body_json is not None  # a pending item keeps its body
        items[item_id] = ("delivered", None)  # an id given twice is delivered once
        message = known.get(item_id)
        if message is None:
            message = load_message(body_json)
        seq = append_message(db, conversation_id, message, body_json, run_id, now)
        db.execute(
            "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, seq = ?, "
            "run_id = ? WHERE id = ?",
            (now, seq, run_id, item_id),
        )
        stored.append(StoredMessage(seq=seq, message=message))
    return stored


def record_usage(
    db: sqlite3.Connection, run_id: int, usage: Usage, model: str | None, now: float
) -> None:
    """One ledger entry, attributed to the run's conversation, user and channel."""
    cursor = db.execute(
        "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at, "
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        "SELECT id, conversation_id, user_id, channel_key, COALESCE(?, model), ?, ?, ?, ?, ?, ? "
        "FROM runs WHERE id = ?",
        (
            model,
            now,
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


def latest_compaction(db: sqlite3.Connection, conversation_id: int) -> Compaction | None:
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


def messages_after(db: sqlite3.Connection, conversation_id: int, seq: int) -> list[StoredMessage]:
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


def conversation_row(db: sqlite3.Connection, conversation_id: int, columns: str) -> Any:
    """`columns` of one conversation; KeyError if there is no such conversation."""
    found = db.execute(
        f"SELECT {columns} FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if found is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return found


def run_by_id(db: sqlite3.Connection, run_id: int) -> RunRecord:
    found = db.execute(
        f"SELECT {RUN_COLUMNS}, r.input_tokens, r.output_tokens, r.cache_read_tokens, "
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
            f"SELECT {USAGE_SUMS} FROM usage_ledger WHERE run_id = ?", (run_id,)
        ).fetchone()
        row = row[:12] + tuple(sums)
    return run_record(row)


def run_record(row: Sequence[Any]) -> RunRecord:
    outcome = str(row[3])
    if outcome not in OUTCOMES:
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
        usage=usage_of(row[12:17]),
    )


def usage_of(row: Sequence[Any]) -> Usage:
    return Usage(
        input=int(row[0]),
        output=int(row[1]),
        cache_read=int(row[2]),
        cache_write=int(row[3]),
        cost=float(row[4]),
    )


def claim_all(db: sqlite3.Connection, delivery_ids: Sequence[str], now: float) -> bool:
    """Claim every id, or (if any one was claimed before) none: a repeat changes nothing."""
    marks = ", ".join("?" * len(delivery_ids))
    seen = db.execute(f"SELECT 1 FROM deliveries WHERE id IN ({marks}) LIMIT 1", delivery_ids)
    if seen.fetchone() is not None:
        return False
    db.executemany(
        "INSERT INTO deliveries (id, claimed_at) VALUES (?, ?)",
        [(delivery_id, now) for delivery_id in delivery_ids],
    )
    return True


def load_json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise SchemaError(f"a stored configuration is not a JSON object: {text[:80]!r}")
    return value
