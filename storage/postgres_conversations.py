"""The SQL of conversations, their messages and compactions, on PostgreSQL.

Owns: the calls behind `get_or_create_conversation`, `get_conversation`,
`channel_conversations`, `update_conversation`, `load` (ONE statement: one snapshot),
`messages_after`, `message_count` and `add_compaction`, each run by `PostgresStore` on one
pooled connection. Appends are grouped (`postgres_batch`); the statements several methods
share are `postgres_statements`.

Must not: acquire connections or open transactions; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import json

import asyncpg

from storage import postgres_fencing as fencing
from storage import postgres_statements as pg_statements
from storage import rows
from storage.records import (
    Compaction,
    Conversation,
    Fence,
    FencedOut,
    LoadedConversation,
    StoredMessage,
)


async def get_or_create(
    connection: asyncpg.Connection, key: str, channel_key: str, title: str | None, now: float
) -> Conversation:
    row = await connection.fetchrow(
        "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) "
        "VALUES ($1, $2, $3, $4, $4) ON CONFLICT (key) DO NOTHING "
        f"RETURNING {rows.CONVERSATION_COLUMNS}",
        key,
        channel_key,
        title,
        now,
    )
    if row is None:  # it existed; this later statement sees it even if just committed
        row = await connection.fetchrow(
            f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = $1", key
        )
    assert row is not None
    return rows.conversation_from(row)


async def get(connection: asyncpg.Connection, key: str) -> Conversation | None:
    row = await connection.fetchrow(
        f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE key = $1", key
    )
    return None if row is None else rows.conversation_from(row)


async def of_channel(
    connection: asyncpg.Connection, channel_key: str, limit: int
) -> list[Conversation]:
    """The channel's conversations, the most recently created first, at most `limit`."""
    found = await connection.fetch(
        f"SELECT {rows.CONVERSATION_COLUMNS} FROM conversations WHERE channel_key = $1 "
        "ORDER BY id DESC LIMIT $2",
        channel_key,
        max(0, limit),
    )
    return [rows.conversation_from(row) for row in found]


async def update(
    connection: asyncpg.Connection,
    conversation_id: int,
    title: str | None,
    settings_json: str | None,
    now: float,
) -> Conversation:
    row = await connection.fetchrow(
        "UPDATE conversations SET title = COALESCE($1, title), "
        "settings = COALESCE($2::jsonb, settings), updated_at = $3 WHERE id = $4 "
        f"RETURNING {rows.CONVERSATION_COLUMNS}",
        title,
        settings_json,
        now,
        conversation_id,
    )
    if row is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return rows.conversation_from(row)


async def load(connection: asyncpg.Connection, conversation_id: int) -> LoadedConversation:
    """The conversation, its latest compaction and every message after it: ONE statement."""
    row = await connection.fetchrow(pg_statements.LOAD, conversation_id)
    if row is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    compaction = None if row[7] is None else rows.compaction_from(conversation_id, row[7:12])
    found = list(zip(row[12] or (), row[13] or (), strict=True))
    conversation = rows.conversation_from(row)
    return LoadedConversation(conversation, compaction, rows.stored_messages(found))


async def messages_after(
    connection: asyncpg.Connection, conversation_id: int, seq: int
) -> list[StoredMessage]:
    found = await connection.fetch(
        "SELECT seq, body FROM messages WHERE conversation_id = $1 AND seq > $2 ORDER BY seq",
        conversation_id,
        seq,
    )
    return rows.stored_messages(found)


async def message_count(connection: asyncpg.Connection, conversation_id: int) -> int:
    value = await connection.fetchval(
        "SELECT last_seq FROM conversations WHERE id = $1", conversation_id
    )
    if value is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return int(value)


async def add_compaction(
    connection: asyncpg.Connection,
    conversation_id: int,
    summary: str,
    up_to_seq: int,
    details_json: str,
    now: float,
    fence: Fence | None = None,
) -> Compaction:
    """Stored only if messages 1..`up_to_seq` exist (`ValueError` otherwise) and the fence,
    if any, holds (`FencedOut` otherwise)."""
    row = await connection.fetchrow(
        "WITH c AS (SELECT last_seq FROM conversations WHERE id = $1), "
        f"f AS (SELECT {fencing.held('$1', '$6', '$7')} AS held), "
        "added AS (INSERT INTO compactions (conversation_id, summary, up_to_seq, "
        "details, created_at) SELECT $1, $2, $3::bigint, $4::jsonb, $5 FROM c "
        "WHERE $3::bigint > 0 AND $3::bigint <= c.last_seq AND (SELECT held FROM f) "
        "RETURNING id) "
        "SELECT c.last_seq, (SELECT id FROM added), (SELECT held FROM f) FROM c",
        conversation_id,
        summary,
        up_to_seq,
        details_json,
        now,
        *fencing.args(fence),
    )
    if row is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    if not row[2]:
        raise FencedOut(conversation_id, "compacting")
    if row[1] is None:
        raise ValueError(
            f"up_to_seq {up_to_seq} is outside the conversation's messages 1..{row[0]}"
        )
    return Compaction(
        id=int(row[1]),
        conversation_id=conversation_id,
        summary=summary,
        up_to_seq=up_to_seq,
        created_at=now,
        details=json.loads(details_json),
    )
