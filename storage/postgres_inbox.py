"""The SQL of deliveries and the inbox, on PostgreSQL.

Owns: the calls behind `claim_delivery`, `prune_deliveries`, `accept_delivery` (ONE statement
that claims, gets or creates, queues and notifies the other instances on commit; a backfill is
a second), `pending`, `pending_conversations`, `deliver` (ONE statement: items locked, so two
instances deliver an item once) and `drop`, each run by `PostgresStore` on one pooled
connection. A delivery id is a primary key: of two claimers the second waits for the first to
commit, then sees the conflict.

Must not: acquire connections or open transactions; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import asyncpg

from core.messages import Message, UserMessage
from storage import postgres_fencing as fencing
from storage import postgres_statements as pg_statements
from storage import rows
from storage.postgres_instances import Instances
from storage.records import Accepted, Fence, FencedOut, InboxItem, StoredMessage


class Repeated(Exception):
    """A delivery claimed before: the accepting statement (or transaction) is undone."""


async def claim(connection: asyncpg.Connection, delivery_id: str, now: float) -> bool:
    # A concurrent claimer of the same id waits for this transaction, then sees the conflict.
    claimed = await connection.fetchval(
        "INSERT INTO deliveries (id, claimed_at) VALUES ($1, $2) ON CONFLICT DO NOTHING "
        "RETURNING true",
        delivery_id,
        now,
    )
    return claimed is not None


async def prune(connection: asyncpg.Connection, cutoff: float) -> int:
    status = await connection.execute("DELETE FROM deliveries WHERE claimed_at < $1", cutoff)
    return int(status.rsplit(" ", 1)[1])


@dataclass(frozen=True, slots=True)
class AcceptCall:
    key: str
    channel_key: str
    title: str | None
    claims: list[str]  # every id naming the delivery, claimed together
    delivery_id: str | None  # kept with the inbox item
    message: Message
    body_json: str
    ref_json: str
    backfill: list[tuple[Message, str]]
    now: float


async def accept(
    connection: asyncpg.Connection, instances: Instances, call: AcceptCall
) -> Accepted:
    """Raises `Repeated` when some id in `call.claims` was claimed before (here or elsewhere)."""
    author_id = author_name = platform_id = None
    if isinstance(call.message, UserMessage):
        platform_id = call.message.platform_message_id
        if call.message.author is not None:
            author_id, author_name = call.message.author.id, call.message.author.name
    # One statement: claim, get or create (the upsert locks the conversation's row, so a
    # concurrent first message waits and then finds `accepted` > 0), queue, and notify the
    # other instances on commit.
    try:
        row = await connection.fetchrow(
            pg_statements.ACCEPT
            + ", "
            + instances.inbox_notify_sql("$12", "conv.id", "$5", "item.id", "$13"),
            call.claims,
            call.body_json,
            call.ref_json,
            call.now,
            call.key,
            call.channel_key,
            call.title,
            author_id,
            author_name,
            platform_id,
            call.delivery_id,
            instances.channel,
            instances.instance_id,
        )
    except asyncpg.UniqueViolationError:  # claimed before (here or elsewhere)
        raise Repeated from None
    assert row is not None
    conversation = rows.conversation_from(row)
    # New means nothing was ever said here: no history and nothing accepted before.
    created = int(row[7]) == 0 and int(row[8]) == 1
    if created and call.backfill:
        await pg_statements.append_many(connection, conversation.id, call.backfill, None, call.now)
    item = InboxItem(
        id=int(row[9]),
        conversation_id=conversation.id,
        message=call.message,
        surface_ref=json.loads(call.ref_json),
        received_at=call.now,
    )
    return Accepted(conversation=conversation, item=item, created=created)


async def pending(connection: asyncpg.Connection, conversation_id: int) -> list[InboxItem]:
    """Inbox items neither delivered nor dropped, in arrival order."""
    found = await connection.fetch(
        "SELECT i.id, i.body, i.surface_ref, i.received_at FROM conversations c "
        "LEFT JOIN inbox i ON i.conversation_id = c.id AND i.state = 'pending' "
        "WHERE c.id = $1 ORDER BY i.id",
        conversation_id,
    )
    if not found:
        raise KeyError(f"no conversation with id {conversation_id}")
    return [rows.inbox_item(conversation_id, row) for row in found if row[0] is not None]


async def pending_conversations(connection: asyncpg.Connection) -> list[int]:
    """Conversations with pending inbox items, the one waiting longest first."""
    found = await connection.fetch(
        "SELECT conversation_id FROM inbox WHERE state = 'pending' "
        "GROUP BY conversation_id ORDER BY MIN(id)"
    )
    return [int(row[0]) for row in found]


async def deliver(
    connection: asyncpg.Connection,
    conversation_id: int,
    ids: list[int],
    now: float,
    run_id: int | None,
    known: dict[int, Message],
    fence: Fence | None = None,
) -> list[StoredMessage]:
    try:
        row = await connection.fetchrow(
            pg_statements.DELIVER, conversation_id, ids, now, run_id, *fencing.args(fence)
        )
    except asyncpg.ForeignKeyViolationError:
        raise KeyError(f"no run with id {run_id}") from None
    return pg_statements.delivered(conversation_id, row, known)


async def drop(
    connection: asyncpg.Connection,
    conversation_id: int,
    ids: list[int],
    reason: str,
    now: float,
    fence: Fence | None = None,
) -> None:
    # One statement: writes nothing unless every id is this conversation's (and the fence,
    # if any, holds).
    row = await connection.fetchrow(
        "WITH known AS (SELECT id FROM inbox WHERE id = ANY($1::bigint[]) "
        f"AND conversation_id = $2), f AS (SELECT {fencing.held('$2', '$5', '$6')} AS held), "
        "dropped AS (UPDATE inbox SET state = 'dropped', settled_at = $3, reason = $4 "
        "WHERE id IN (SELECT id FROM known) AND state = 'pending' AND (SELECT held FROM f) "
        "AND (SELECT count(*) FROM known) = cardinality($1::bigint[])) "
        "SELECT (SELECT count(*) FROM known), (SELECT held FROM f)",
        ids,
        conversation_id,
        now,
        reason,
        *fencing.args(fence),
    )
    assert row is not None
    known = row[0]
    if not row[1]:
        raise FencedOut(conversation_id, "dropping")
    if int(known) != len(ids):
        raise KeyError(f"unknown inbox items among {ids} in {conversation_id}")
