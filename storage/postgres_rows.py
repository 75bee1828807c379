"""Rows to records for the PostgreSQL store, and the SQL several of its methods share.

Owns: turning asyncpg records into `storage.base` records, the column lists, and the
statements more than one store method runs inside its transaction (appending messages,
delivering inbox items, reading a run with its usage). Every function runs on a connection
the caller holds, inside the caller's transaction.

Must not: acquire connections or open transactions; import `tools` or `bots`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from typing import Any, cast, get_args

import asyncpg

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

USAGE_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_usd), 0.0)"
)

# A run with its usage: a running run's is the ledger so far, a finished one's was totalled
# when it finished. One query, however many runs.
RUN_SELECT = f"""
    SELECT r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at, r.user_id,
           r.channel_key, r.model, r.error, r.surface_ref, r.owner,
           COALESCE(l.i, r.input_tokens), COALESCE(l.o, r.output_tokens),
           COALESCE(l.cr, r.cache_read_tokens), COALESCE(l.cw, r.cache_write_tokens),
           COALESCE(l.cost, r.cost_usd)
    FROM runs r
    JOIN conversations c ON c.id = r.conversation_id
    LEFT JOIN LATERAL (
        SELECT {USAGE_SUMS} FROM usage_ledger WHERE run_id = r.id AND r.outcome = 'running'
    ) AS l (i, o, cr, cw, cost) ON r.outcome = 'running'
"""

# Appends messages as the conversation's next seqs in one statement: bumps `last_seq` by
# how many (a row lock that orders concurrent appends) and inserts them in the order given.
# $1 conversation, $2 run, $3 now, $4.. one array per column. Returns the first new seq.
APPEND_MANY = """
    WITH c AS (
        UPDATE conversations SET last_seq = last_seq + cardinality($4::text[]), updated_at = $3
        WHERE id = $1 RETURNING last_seq - cardinality($4::text[]) AS base
    ), m AS (
        INSERT INTO messages (conversation_id, seq, role, author_id, author_name,
                              platform_message_id, run_id, created_at, body)
        SELECT $1, c.base + u.n, u.role, u.author_id, u.author_name, u.platform_id, $2, $3,
               u.body
        FROM c, unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
            WITH ORDINALITY AS u (role, author_id, author_name, platform_id, body, n)
    )
    SELECT base + 1 FROM c
"""


def dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def columns_of(messages: Sequence[tuple[Message, str]]) -> list[list[str | None]]:
    """`APPEND_MANY`'s column arrays for `(message, its JSON)` pairs."""
    roles: list[str | None] = []
    author_ids: list[str | None] = []
    author_names: list[str | None] = []
    platform_ids: list[str | None] = []
    bodies: list[str | None] = []
    for message, body_json in messages:
        author_id = author_name = platform_id = None
        if isinstance(message, UserMessage):
            platform_id = message.platform_message_id
            if message.author is not None:
                author_id, author_name = message.author.id, message.author.name
        roles.append(message.role)
        author_ids.append(author_id)
        author_names.append(author_name)
        platform_ids.append(platform_id)
        bodies.append(body_json)
    return [roles, author_ids, author_names, platform_ids, bodies]


async def append_many(
    connection: asyncpg.Connection,
    conversation_id: int,
    messages: Sequence[tuple[Message, str]],
    run_id: int | None,
    now: float,
) -> int:
    """Append `(message, JSON)` pairs as the next seqs; return the first one's seq."""
    try:
        first = await connection.fetchval(
            APPEND_MANY, conversation_id, run_id, now, *columns_of(messages)
        )
    except asyncpg.ForeignKeyViolationError:
        raise KeyError(f"no run with id {run_id}") from None
    if first is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return int(first)


async def deliver_items(
    connection: asyncpg.Connection,
    conversation_id: int,
    item_ids: Sequence[int],
    known: dict[int, Message],
    run_id: int | None,
    now: float,
) -> list[StoredMessage]:
    """Append pending inbox items to history in the order given and mark them delivered;
    settled ones are skipped. The items are locked first, so two instances delivering the
    same item deliver it once. KeyError (nothing written) unless every item is this
    conversation's. `known`: messages already in memory, so they are not parsed again.
    Runs inside the caller's transaction."""
    order = list(dict.fromkeys(item_ids))  # an id given twice is delivered once
    if not order:
        return []
    found = await connection.fetch(
        "SELECT id, state, body FROM inbox WHERE id = ANY($1::bigint[]) AND conversation_id = $2 "
        "FOR UPDATE",
        order,
        conversation_id,
    )
    rows = {int(row[0]): row for row in found}
    for item_id in order:
        if item_id not in rows:
            raise KeyError(f"no inbox item {item_id} in conversation {conversation_id}")
    todo = [item_id for item_id in order if rows[item_id][1] == "pending"]
    if not todo:
        return []
    pairs = [(known.get(i) or load_message(rows[i][2]), str(rows[i][2])) for i in todo]
    first = await connection.fetchval(
        APPEND_MANY.replace(
            "SELECT base + 1 FROM c",
            ", i AS (UPDATE inbox SET state = 'delivered', body = NULL, settled_at = $3, "
            "seq = c.base + d.n, run_id = $2 FROM c, unnest($9::bigint[]) WITH ORDINALITY "
            "AS d (id, n) WHERE inbox.id = d.id) SELECT base + 1 FROM c",
        ),
        conversation_id,
        run_id,
        now,
        *columns_of(pairs),
        todo,
    )
    if first is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return [StoredMessage(seq=int(first) + n, message=m) for n, (m, _) in enumerate(pairs)]


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


def inbox_item(conversation_id: int, row: Sequence[Any]) -> InboxItem:
    """An inbox row as `(id, body, surface_ref, received_at)`."""
    return InboxItem(
        id=int(row[0]),
        conversation_id=conversation_id,
        message=load_message(row[1]),
        surface_ref=json.loads(row[2]),
        received_at=float(row[3]),
    )


def compaction_from(conversation_id: int, row: Sequence[Any]) -> Compaction:
    """`(id, summary, up_to_seq, details, created_at)`."""
    return Compaction(
        id=int(row[0]),
        conversation_id=conversation_id,
        summary=str(row[1]),
        up_to_seq=int(row[2]),
        created_at=float(row[4]),
        details=json.loads(row[3]),
    )


def stored_messages(rows: Sequence[Sequence[Any]]) -> list[StoredMessage]:
    """`(seq, body)` rows, parsed with the cyclic GC paused (see `sqlite_rows`: nothing here
    forms cycles, and its passes over a big heap would double a long load)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [StoredMessage(seq=int(row[0]), message=load_message(row[1])) for row in rows]
    finally:
        if was_enabled:
            gc.enable()


def run_record(row: Sequence[Any]) -> RunRecord:
    """A `RUN_SELECT` row."""
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


async def run_by_id(connection: asyncpg.Connection, run_id: int) -> RunRecord:
    row = await connection.fetchrow(f"{RUN_SELECT} WHERE r.id = $1", run_id)
    if row is None:
        raise KeyError(f"no run with id {run_id}")
    return run_record(row)
