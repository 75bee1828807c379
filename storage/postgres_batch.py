"""Group commit for PostgreSQL appends, on the shared `storage.batching` (the batching idea
that made the SQLite store fast, docs/architecture.md "Storage"): concurrent appends, to any
conversations, in ONE statement.

Owns: the append as a `batching.Op` (`APPEND`) and PostgreSQL's transaction statements
(`PgTransactions`). The store runs it on `Batcher.pooled`: up to half its pool's connections
carry appends at once, each a unit of its own.

- A lone append (a lane free, nothing queued) is one autocommit statement (`pg_statements.APPEND`).
- Appends made while every lane is busy queue; the next unit takes all of them: one `UPDATE
  ... RETURNING` of the conversations' `last_seq` (rows locked in id order first, so two
  batches never deadlock on each other), one `INSERT` of the messages, one of the ledger
  entries, as ONE statement (`MULTI_APPEND`): atomic by itself, so no BEGIN/COMMIT round trips
  (`many_is_one_statement`). An unknown conversation fails its append alone inside the batch
  (it gets no seq; nothing of it is written), and so does an append whose fence no longer
  holds (`FencedOut`): each append carries its run's lease, checked in the same statement.
- A batch that fails (an unknown run's foreign key, a deadlock with another instance) is
  retried by the batcher in one transaction with a SAVEPOINT per append: only the faulty one
  fails.

Must not: import `tools` or `bots`; know any table but conversations, messages, runs and the
usage ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from core.messages import Message, Usage
from storage import postgres_statements as pg_statements
from storage.batching import Op
from storage.records import Fence, FencedOut

MULTI_APPEND = """
    WITH input AS (
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::text[], $8::float8[], $9::text[], $10::bool[],
                             $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[],
                             $15::float8[], $16::text[], $17::bigint[])
            WITH ORDINALITY AS u (conv, run_id, role, author_id, author_name, platform_id,
                                  body, at, model, charge, i, o, cr, cw, cost, holder, epoch,
                                  n)
    ), fenced AS (
        -- the leases fenced appends carry, locked FOR SHARE in conversation order (as the
        -- heartbeat locks them): see storage/postgres_fencing.py
        SELECT l.conversation_id, l.holder, l.epoch FROM conversation_leases l
        WHERE (l.conversation_id, l.holder, l.epoch) IN (
            SELECT conv, holder, epoch FROM input WHERE holder IS NOT NULL)
        ORDER BY l.conversation_id FOR SHARE
    ), allowed AS (
        SELECT x.* FROM input x WHERE x.holder IS NULL OR EXISTS (
            SELECT 1 FROM fenced f
            WHERE f.conversation_id = x.conv AND f.holder = x.holder AND f.epoch = x.epoch)
    ), counts AS (
        SELECT conv, count(*) AS k, max(at) AS at FROM allowed GROUP BY conv
    ), locked AS (
        SELECT id FROM conversations WHERE id IN (SELECT conv FROM counts)
        ORDER BY id FOR UPDATE
    ), c AS (
        UPDATE conversations SET last_seq = last_seq + counts.k, updated_at = counts.at
        FROM counts
        WHERE conversations.id = counts.conv AND conversations.id IN (SELECT id FROM locked)
        RETURNING conversations.id, conversations.last_seq - counts.k AS base
    ), numbered AS (
        SELECT x.*, c.base + row_number() OVER (PARTITION BY x.conv ORDER BY x.n) AS seq
        FROM allowed x JOIN c ON c.id = x.conv
    ), m AS (
        INSERT INTO messages (conversation_id, seq, role, author_id, author_name,
                              platform_message_id, run_id, created_at, body)
        SELECT conv, seq, role, author_id, author_name, platform_id, run_id, at, body
        FROM numbered
    ), l AS (
        INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at,
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd)
        SELECT r.id, r.conversation_id, r.user_id, r.channel_key, COALESCE(x.model, r.model),
               x.at, x.i, x.o, x.cr, x.cw, x.cost
        FROM numbered x JOIN runs r ON r.id = x.run_id
        WHERE x.charge
    )
    SELECT n, seq FROM numbered
"""


class PgTransactions:
    """The batcher's transaction statements, on PostgreSQL (read committed)."""

    async def begin(self, db: asyncpg.Connection) -> None:
        await db.execute("BEGIN")

    async def commit(self, db: asyncpg.Connection) -> None:
        await db.execute("COMMIT")

    async def rollback(self, db: asyncpg.Connection) -> None:
        await db.execute("ROLLBACK")

    async def savepoint(self, db: asyncpg.Connection) -> None:
        await db.execute("SAVEPOINT store_call")

    async def release(self, db: asyncpg.Connection) -> None:
        await db.execute("RELEASE SAVEPOINT store_call")

    async def rollback_to(self, db: asyncpg.Connection) -> None:
        await db.execute("ROLLBACK TO SAVEPOINT store_call")
        await db.execute("RELEASE SAVEPOINT store_call")


@dataclass(frozen=True, slots=True)
class AppendCall:
    conversation_id: int
    message: Message
    body_json: str
    run_id: int | None
    now: float
    usage: Usage | None  # charged: its ledger entry is written by the same statement
    model: str | None
    fence: Fence | None = None  # the run's lease: written only while it holds


async def _append_one(db: asyncpg.Connection, call: AppendCall) -> int:
    return await pg_statements.append_many(
        db,
        call.conversation_id,
        [(call.message, call.body_json)],
        call.run_id,
        call.now,
        call.usage,
        call.model,
        call.fence,
    )


async def _append_many(
    db: asyncpg.Connection, calls: list[AppendCall]
) -> Sequence[int | Exception]:
    columns = pg_statements.columns_of([(call.message, call.body_json) for call in calls])
    no_usage = Usage()
    usages = [call.usage or no_usage for call in calls]
    found = await db.fetch(
        MULTI_APPEND,
        [call.conversation_id for call in calls],
        [call.run_id for call in calls],
        *columns,
        [call.now for call in calls],
        [call.model for call in calls],
        [call.usage is not None for call in calls],
        [u.input for u in usages],
        [u.output for u in usages],
        [u.cache_read for u in usages],
        [u.cache_write for u in usages],
        [u.cost for u in usages],
        [call.fence.holder if call.fence else None for call in calls],
        [call.fence.epoch if call.fence else None for call in calls],
    )
    seqs = {int(row[0]): int(row[1]) for row in found}
    return [seqs[n] if n in seqs else _refused(call) for n, call in enumerate(calls, start=1)]


def _refused(call: AppendCall) -> Exception:
    if call.fence is not None:  # a fence exists only for a known conversation
        return FencedOut(call.conversation_id, "appending")
    return KeyError(f"no conversation with id {call.conversation_id}")


# The seq the message got (KeyError: unknown conversation or run).
APPEND: Op[asyncpg.Connection, AppendCall, int] = Op(
    "append",
    one=_append_one,
    lone=_append_one,
    many=_append_many,
    many_is_one_statement=True,
)
