"""The SQL several PostgreSQL store methods share, and the rows only its statements answer.

Owns: the statements more than one store method runs inside its transaction (appending
messages, delivering inbox items, reading a run with its usage), the column arrays `APPEND`
takes and the rows `DELIVER` answers. Every function runs on a connection the caller holds,
inside the caller's transaction. Rows every backend reads alike are `storage.rows`.

Must not: acquire connections or open transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from core.messages import Message, Usage, UserMessage, load_message
from storage import postgres_fencing as fencing
from storage.base import Fence, FencedOut, RunRecord, StoredMessage
from storage.rows import CONVERSATION_COLUMNS, USAGE_SUMS, run_record

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
# how many (a row lock that orders concurrent appends) and inserts them in the order given;
# with `$10` true, also one usage ledger entry for run `$2` (a model reply's), only if the
# conversation exists. $1 conversation, $2 run, $3 now, $4..$8 one array per column, $9 the
# reply's model, $10 charge?, $11..$15 tokens and cost, $16 $17 the fence (NULL: none).
# Returns the first new seq (nothing: unknown conversation, or fenced out).
APPEND = f"""
    WITH c AS (
        UPDATE conversations SET last_seq = last_seq + cardinality($4::text[]), updated_at = $3
        WHERE id = $1 AND {fencing.held("$1", "$16", "$17")}
        RETURNING last_seq - cardinality($4::text[]) AS base
    ), m AS (
        INSERT INTO messages (conversation_id, seq, role, author_id, author_name,
                              platform_message_id, run_id, created_at, body)
        SELECT $1, c.base + u.n, u.role, u.author_id, u.author_name, u.platform_id, $2, $3,
               u.body
        FROM c, unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
            WITH ORDINALITY AS u (role, author_id, author_name, platform_id, body, n)
    ), u AS (
        INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at,
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd)
        SELECT id, conversation_id, user_id, channel_key, COALESCE($9, model), $3, $11, $12,
               $13, $14, $15
        FROM runs WHERE id = $2 AND $10::boolean AND EXISTS (SELECT 1 FROM c)
    )
    SELECT base + 1 FROM c
"""

# Delivers inbox items `$2` (distinct ids, in the loop's order) to history in ONE statement:
# locks them (two instances delivering one item deliver it once), skips settled ones, and
# writes nothing unless every id is conversation `$1`'s. `{run}` is `$4` (a known run) or, for
# `start_run`, the run this very statement records; `{holder}` `{epoch}` the fence (NULL:
# none; fenced out, nothing is written). Answers: all known?, the run id, the run's channel,
# the conversation's key, the first new seq, delivered ids and their bodies, fence held?
_DELIVER = """
    WITH wanted AS (
        SELECT w.id, w.n FROM unnest($2::bigint[]) WITH ORDINALITY AS w (id, n)
    ), known AS (
        SELECT i.id, i.state, i.body, i.author_id, i.author_name, i.platform_message_id, w.n
        FROM inbox i JOIN wanted w ON w.id = i.id
        WHERE i.conversation_id = $1
        ORDER BY i.id FOR UPDATE OF i  -- one lock order for every deliverer: no deadlock
    ), ok AS (
        SELECT (SELECT count(*) FROM known) = cardinality($2::bigint[]) AS all_known,
               {held} AS fence_held
    ), todo AS (
        SELECT k.*, row_number() OVER (ORDER BY k.n) AS k FROM known k
        WHERE k.state = 'pending'
    ){run_cte}, c AS (
        UPDATE conversations SET last_seq = last_seq + (SELECT count(*) FROM todo),
            updated_at = $3
        WHERE id = $1 AND (SELECT all_known AND fence_held FROM ok)
            AND EXISTS (SELECT 1 FROM todo)
        RETURNING last_seq - (SELECT count(*) FROM todo) AS base
    ), m AS (
        INSERT INTO messages (conversation_id, seq, role, author_id, author_name,
                              platform_message_id, run_id, created_at, body)
        SELECT $1, c.base + t.k, 'user', t.author_id, t.author_name, t.platform_message_id,
               {run}, $3, t.body
        FROM c, todo t
    ), d AS (
        UPDATE inbox SET state = 'delivered', body = NULL, settled_at = $3, seq = c.base + t.k,
            run_id = {run}
        FROM c, todo t WHERE inbox.id = t.id
    )
    SELECT (SELECT all_known FROM ok), {run}, {run_channel},
           (SELECT key FROM conversations WHERE id = $1), (SELECT base FROM c),
           array(SELECT t.id FROM todo t ORDER BY t.k),
           array(SELECT t.body FROM todo t ORDER BY t.k), (SELECT fence_held FROM ok)
"""
DELIVER = _DELIVER.format(
    run_cte="", run="$4::bigint", run_channel="NULL::text", held=fencing.held("$1", "$5", "$6")
)
# $4 user, $5 channel (NULL: the conversation's), $6 model, $7 surface_ref, $8 owner, $9 $10
# the fence.
START_RUN_DELIVERING = _DELIVER.format(
    run_cte=""", r AS (
        INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, model,
                          surface_ref, owner)
        SELECT id, 'running', $3, $4, COALESCE($5, channel_key), $6, $7::jsonb, $8::jsonb
        FROM conversations WHERE id = $1 AND (SELECT all_known AND fence_held FROM ok)
        RETURNING id, channel_key
    )""",
    run="(SELECT id FROM r)",
    run_channel="(SELECT channel_key FROM r)",
    held=fencing.held("$1", "$9", "$10"),
)


# A conversation, its latest compaction and the messages after it (seqs and bodies as
# arrays), in one statement.
LOAD = f"""
    SELECT c.{CONVERSATION_COLUMNS.replace(", ", ", c.")},
           k.id, k.summary, k.up_to_seq, k.details, k.created_at, m.seqs, m.bodies
    FROM conversations c
    LEFT JOIN LATERAL (
        SELECT id, summary, up_to_seq, details, created_at FROM compactions
        WHERE conversation_id = c.id ORDER BY id DESC LIMIT 1
    ) k ON true
    LEFT JOIN LATERAL (
        SELECT array_agg(seq ORDER BY seq) AS seqs, array_agg(body ORDER BY seq) AS bodies
        FROM messages WHERE conversation_id = c.id AND seq > COALESCE(k.up_to_seq, 0)
    ) m ON true
    WHERE c.id = $1
"""


# Accepts a message in one statement: $1 every id naming the delivery (claimed all together: a
# unique violation means some were claimed before, and the whole statement is undone), $2 body,
# $3 surface_ref, $4 now, $5 key, $6 channel, $7 title, $8..$10 author id, name, platform id,
# $11 the delivery id kept with the item. The caller appends `, pg_notify(...)` to the final
# SELECT list (evaluated once, for the one row).
ACCEPT = f"""
    WITH claim AS (
        INSERT INTO deliveries (id, claimed_at) SELECT unnest($1::text[]), $4 RETURNING true
    ), conv AS (
        INSERT INTO conversations (key, channel_key, title, created_at, updated_at, accepted)
        SELECT $5, $6, $7, $4, $4, 1
        WHERE cardinality($1::text[]) = 0 OR EXISTS (SELECT 1 FROM claim)
        ON CONFLICT (key) DO UPDATE SET accepted = conversations.accepted + 1
        RETURNING {CONVERSATION_COLUMNS}, last_seq, accepted
    ), item AS (
        INSERT INTO inbox (conversation_id, delivery_id, body, surface_ref, received_at,
                           author_id, author_name, platform_message_id)
        SELECT conv.id, $11, $2, $3::jsonb, $4, $8, $9, $10 FROM conv
        RETURNING id
    )
    SELECT conv.*, item.id FROM conv, item
"""


# Replaces a run's surface ref and answers its `RUN_SELECT`-shaped row (none for an unknown
# run, or a fenced-out one): the write and the read in ONE statement, one round trip. $1 ref
# (json), $2 run, $3 $4 the fence.
SET_SURFACE_REF = (
    "WITH updated AS (UPDATE runs SET surface_ref = $1::jsonb WHERE id = $2 AND "
    + fencing.held("runs.conversation_id", "$3", "$4")
    + " RETURNING *) "
    + RUN_SELECT.replace("FROM runs r", "FROM updated r", 1)
)


# Closes a running run, totalling its usage from the ledger: a `RUN_SELECT`-shaped row, or
# none if it was not running (or the fence did not hold). $1 outcome, $2 error, $3 now, $4
# run, $5 $6 the fence.
FINISH_RUN = f"""
    UPDATE runs r SET outcome = $1, error = $2, finished_at = $3,
        (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd)
        = (SELECT {USAGE_SUMS} FROM usage_ledger WHERE run_id = $4)
    FROM conversations c
    WHERE r.id = $4 AND r.outcome = 'running' AND c.id = r.conversation_id
        AND {fencing.held("r.conversation_id", "$5", "$6")}
    RETURNING r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at,
              r.user_id, r.channel_key, r.model, r.error, r.surface_ref, r.owner,
              r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens,
              r.cost_usd
"""


def delivered(
    conversation_id: int, row: Sequence[Any] | None, known: dict[int, Message]
) -> list[StoredMessage]:
    """The messages a `DELIVER`/`START_RUN_DELIVERING` row says were delivered; KeyError if
    some item was not the conversation's, FencedOut if the fence did not hold (then nothing
    was written)."""
    if row is None or row[3] is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    if not row[7]:
        raise FencedOut(conversation_id, "delivering")
    if not row[0]:
        raise KeyError(f"unknown inbox items in conversation {conversation_id}")
    ids, bodies, base = row[5], row[6], row[4]
    return [
        StoredMessage(seq=int(base) + 1 + n, message=known.get(int(i)) or load_message(body))
        for n, (i, body) in enumerate(zip(ids, bodies, strict=True))
    ]


def columns_of(messages: Sequence[tuple[Message, str]]) -> list[list[str | None]]:
    """`APPEND`'s column arrays for `(message, its JSON)` pairs."""
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
    usage: Usage | None = None,
    model: str | None = None,
    fence: Fence | None = None,
) -> int:
    """Append `(message, JSON)` pairs as the next seqs (with `usage`: its ledger entry for
    `run_id` in the same statement); return the first one's seq. With `fence`, only while
    it holds (`FencedOut` else: nothing written)."""
    charge = usage or Usage()
    try:
        first = await connection.fetchval(
            APPEND,
            conversation_id,
            run_id,
            now,
            *columns_of(messages),
            model,
            usage is not None,
            charge.input,
            charge.output,
            charge.cache_read,
            charge.cache_write,
            charge.cost,
            *fencing.args(fence),
        )
    except asyncpg.ForeignKeyViolationError:
        raise KeyError(f"no run with id {run_id}") from None
    if first is None and fence is not None:  # a fence exists only for a known conversation
        raise FencedOut(conversation_id, "appending")
    if first is None:
        raise KeyError(f"no conversation with id {conversation_id}")
    return int(first)


async def run_by_id(connection: asyncpg.Connection, run_id: int) -> RunRecord:
    row = await connection.fetchrow(f"{RUN_SELECT} WHERE r.id = $1", run_id)
    if row is None:
        raise KeyError(f"no run with id {run_id}")
    return run_record(row)
