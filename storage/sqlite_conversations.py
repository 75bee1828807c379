"""The SQL of conversations, their messages and compactions, on SQLite.

Owns: the calls behind `get_or_create_conversation`, `update_conversation`, `append_message`
(alone, and many at once in one round trip), `add_compaction` and `load` (many conversations
in ONE statement), as `Op`s the store's batcher runs, and the simple reads behind
`get_conversation`, `channel_conversations`, `messages_after` and `message_count`. A message
takes the next seq as it is inserted (`sqlite_triggers` moves `last_seq`); messages are parsed
on the driver's thread as rows are fetched (an SQLite converter named by the column).

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any

from core.messages import Message, Usage, UserMessage
from storage import rows
from storage.batching import Op
from storage.records import Compaction, Conversation, LoadedConversation, StoredMessage
from storage.sqlite_ops import Db, fetchall, fetchone, json_list, one_of, together
from storage.sqlite_usage import LEDGER_INSERT, known_runs, ledger_row

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

_UPSERT_CONVERSATION = (
    "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET key = excluded.key "
    f"RETURNING {rows.CONVERSATION_COLUMNS}"
)


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


async def _conversation_last_seqs(db: Db, conversation_ids: Iterable[int]) -> dict[int, int]:
    found = await fetchall(
        db,
        "SELECT id, last_seq FROM conversations WHERE id IN (SELECT value FROM json_each(?))",
        (json_list(set(conversation_ids)),),
    )
    return {int(row[0]): int(row[1]) for row in found}


async def _conversations_many(
    db: Db, calls: list[tuple[str, str, str | None, float]]
) -> list[Conversation]:
    _inserted, found = await together(
        db.execute(
            "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
            "json_extract(value, '$[2]'), json_extract(value, '$[3]'), "
            "json_extract(value, '$[3]') FROM json_each(?) WHERE true "
            "ON CONFLICT (key) DO NOTHING",
            (json_list(calls),),
        ),
        fetchall(
            db,
            f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations "
            "WHERE key IN (SELECT json_extract(value, '$[0]') FROM json_each(?))",
            (json_list(calls),),
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
    ledger = [ledger_row(c.run_id, c.usage, c.model, c.now) for c in calls if c.usage]
    run_ids = {c.run_id for c in calls if c.usage is not None and c.run_id is not None}
    steps: list[Awaitable[Any]] = []
    if ledger:
        steps.append(db.executemany(LEDGER_INSERT, ledger))
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
    steps.append(known_runs(db, run_ids))
    *_writes, last_seq, runs = await together(*steps)
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


APPEND: Op[Db, AppendCall, StoredMessage] = Op(
    "append_message", one=one_of(_append_many), lone=_append_lone, many=_append_many
)
APPEND_CHARGED: Op[Db, AppendCall, StoredMessage] = Op(
    "append_message+usage", one=one_of(_append_many), many=_append_many
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
        found = await fetchall(db, _LOAD, (json_list(conversation_ids),))
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
    "load", one=one_of(_load_many), lone=one_of(_load_many), many=_load_many
)


async def read_conversation(db: Db, key: str) -> Conversation | None:
    row = await fetchone(
        db, f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = ?", (key,)
    )
    return None if row is None else rows.conversation_from(row)


async def read_channel_conversations(db: Db, channel_key: str, limit: int) -> list[Conversation]:
    """The channel's conversations, the most recently created first, at most `limit`."""
    found = await fetchall(
        db,
        f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE channel_key = ? "
        "ORDER BY id DESC LIMIT ?",
        (channel_key, max(0, limit)),
    )
    return [rows.conversation_from(row) for row in found]


async def read_message_count(db: Db, conversation_id: int) -> int:
    row = await fetchone(db, "SELECT last_seq FROM conversations WHERE id = ?", (conversation_id,))
    if row is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return int(row[0])


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
