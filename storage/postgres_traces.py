"""The SQL of run traces, full-text search and the console's reads, on PostgreSQL.

Owns: the calls behind `append_trace_events` (a whole batch in one statement over arrays),
`run_traces`, `search_messages` (the generated `messages.search` tsvector and its GIN index,
migration m010), `console_conversations`, `conversation_runs`, `feedback_items` and
`review_feedback`, each one statement.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from storage import console_queries as queries
from storage import postgres_statements as pg_statements
from storage import rows
from storage.records import RunRecord
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    SearchHit,
    TraceEvent,
)

# Events of a run that is gone are skipped (the join), never an error for the whole batch.
_APPEND = """
    INSERT INTO run_trace (run_id, seq, kind, at, duration_ms, data)
    SELECT e.run_id, e.seq, e.kind, e.at, e.duration_ms, e.data::jsonb
    FROM unnest($1::bigint[], $2::integer[], $3::text[], $4::float8[], $5::float8[], $6::text[])
        AS e (run_id, seq, kind, at, duration_ms, data)
    JOIN runs r ON r.id = e.run_id
"""


async def append(connection: asyncpg.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """`rows` as `console_queries.checked_trace` makes them."""
    if not rows:
        return
    await connection.execute(_APPEND, *(list(column) for column in zip(*rows, strict=True)))


async def traces(
    connection: asyncpg.Connection, run_ids: Sequence[int], limit: int
) -> list[TraceEvent]:
    found = await connection.fetch(
        "SELECT run_id, seq, kind, at, duration_ms, data::text FROM run_trace "
        "WHERE run_id = ANY($1::bigint[]) ORDER BY run_id, seq, id LIMIT $2",
        [int(i) for i in run_ids],
        limit,
    )
    return [queries.trace_event(row) for row in found]


async def search(
    connection: asyncpg.Connection, terms: list[str], channel_key: str | None, limit: int
) -> list[SearchHit]:
    found = await connection.fetch(
        queries.SEARCH_SELECT + "WHERE m.search @@ plainto_tsquery('simple', $1) "
        "AND ($2::text IS NULL OR c.channel_key = $2) ORDER BY m.id DESC LIMIT $3",
        " ".join(terms),
        channel_key,
        limit,
    )
    return [queries.search_hit(row) for row in found]


async def conversations(
    connection: asyncpg.Connection,
    wanted: ConversationFilter,
    limit: int,
    before: tuple[float, int] | None,
) -> list[ConversationSummary]:
    text, args = queries.conversations_query(wanted, limit=limit, before=before, backend="postgres")
    return [queries.conversation_summary(row) for row in await connection.fetch(text, *args)]


async def timings(
    connection: asyncpg.Connection, since: float, channel_key: str | None, platform: str | None
) -> AnswerTimings:
    text, args = queries.timings_query(since, channel_key, platform, "postgres")
    return queries.answer_timings(await connection.fetch(text, *args))


async def conversation_runs(
    connection: asyncpg.Connection, conversation_id: int, limit: int
) -> list[RunRecord]:
    found = await connection.fetch(
        f"{pg_statements.RUN_SELECT} WHERE r.conversation_id = $1 ORDER BY r.id DESC LIMIT $2",
        conversation_id,
        limit,
    )
    return [rows.run_record(row) for row in found]


async def feedback(
    connection: asyncpg.Connection, reviewed: bool | None, limit: int, offset: int
) -> list[FeedbackItem]:
    flag = None if reviewed is None else int(reviewed)
    found = await connection.fetch(queries.FEEDBACK_ITEMS.postgres, flag, limit, offset)
    return [queries.feedback_item(row) for row in found]


async def review(
    connection: asyncpg.Connection, run_id: int, by: str, note: str, now: float
) -> None:
    found = await connection.fetchval(queries.REVIEW_FEEDBACK.postgres, run_id, by, note, now)
    if found is None:
        raise KeyError(f"no run {run_id}")
