"""The SQL of run traces, full-text search and the console's reads, on SQLite.

Owns: the call behind `append_trace_events` (one `executemany` for a whole batch, as an `Op`
the store's batcher runs), the reads behind `run_traces`, `search_messages`,
`console_conversations`, `conversation_runs` and `feedback_items`, and the review behind
`review_feedback`, and `CATCH_UP` behind `catch_up_search`. Search runs on the contentless
FTS5 index `messages_fts` (migration m011): messages appended since the last catch-up are
indexed in one transaction, not each as it is appended (FTS5 writes a segment per
transaction: one per message cost every answer about a tenth of a millisecond).

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage import console_queries as queries
from storage import rows
from storage.batching import Op
from storage.records import RunRecord
from storage.sqlite_ops import Db, fetchall, fetchone, json_list
from storage.sqlite_runs import RUN_FIELDS
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    SearchHit,
    TraceEvent,
)

# The text of a user or assistant message's JSON body: a string, or its text parts joined.
_MESSAGE_TEXT = (
    "CASE json_type(body, '$.content') WHEN 'text' THEN json_extract(body, '$.content') "
    "ELSE (SELECT group_concat(json_extract(part.value, '$.text'), ' ') "
    "FROM json_each(body, '$.content') AS part "
    "WHERE json_extract(part.value, '$.type') = 'text') END"
)


async def _catch_up(db: Db, limit: int) -> int:
    """Index the next `limit` messages appended since the last catch-up; how many."""
    (last,) = await fetchone(db, "SELECT last_id FROM search_progress WHERE id = 1")
    (top,) = await fetchone(
        db,
        "SELECT MAX(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
        (last, limit),
    )
    if top is None:
        return 0
    await db.execute(
        f"INSERT INTO messages_fts (rowid, text) SELECT id, COALESCE({_MESSAGE_TEXT}, '') "
        "FROM messages WHERE id > ? AND id <= ? AND role IN ('user', 'assistant')",
        (last, top),
    )
    await db.execute("UPDATE search_progress SET last_id = ? WHERE id = 1", (top,))
    return int(top) - int(last)


CATCH_UP: Op[Db, int, int] = Op("catch_up_search", one=_catch_up)

TRACE_INSERT = (
    "INSERT INTO run_trace (run_id, seq, kind, at, duration_ms, data) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?1)"
)


async def _append_many(db: Db, batches: list[list[tuple[Any, ...]]]) -> list[None]:
    """Every batch in one `executemany` (events of a run that is gone are skipped)."""
    flat = [row for batch in batches for row in batch]
    if flat:
        await db.executemany(TRACE_INSERT, flat)
    return [None] * len(batches)


async def _append_one(db: Db, batch: list[tuple[Any, ...]]) -> None:
    if batch:
        await db.executemany(TRACE_INSERT, batch)


APPEND_TRACE: Op[Db, list[tuple[Any, ...]], None] = Op(
    "append_trace_events", one=_append_one, many=_append_many
)


async def read_traces(db: Db, run_ids: Sequence[int], limit: int) -> list[TraceEvent]:
    found = await fetchall(
        db,
        "SELECT run_id, seq, kind, at, duration_ms, data FROM run_trace "
        "WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY run_id, seq, id LIMIT ?",
        (json_list(int(i) for i in run_ids), limit),
    )
    return [queries.trace_event(row) for row in found]


async def search(db: Db, terms: list[str], channel_key: str | None, limit: int) -> list[SearchHit]:
    match = queries.fts5_query(terms)
    if channel_key is None:
        found = await fetchall(
            db,
            queries.SEARCH_SELECT + "WHERE m.id IN (SELECT rowid FROM messages_fts "
            "WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) ORDER BY m.id DESC",
            (match, limit),
        )
    else:  # the channel's newest matches (scanned newest first, so a busy index stops early)
        found = await fetchall(
            db,
            queries.SEARCH_SELECT + "WHERE m.id IN (SELECT rowid FROM messages_fts "
            "WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) AND c.channel_key = ? "
            "ORDER BY m.id DESC LIMIT ?",
            (match, queries.SEARCH_SCAN, channel_key, limit),
        )
    return [queries.search_hit(row) for row in found]


async def conversations(
    db: Db, wanted: ConversationFilter, limit: int, before: tuple[float, int] | None
) -> list[ConversationSummary]:
    text, args = queries.conversations_query(wanted, limit=limit, before=before, backend="sqlite")
    return [queries.conversation_summary(row) for row in await fetchall(db, text, args)]


async def timings(
    db: Db, since: float, channel_key: str | None, platform: str | None
) -> AnswerTimings:
    text, args = queries.timings_query(since, channel_key, platform, "sqlite")
    return queries.answer_timings(await fetchall(db, text, args))


async def conversation_runs(db: Db, conversation_id: int, limit: int) -> list[RunRecord]:
    found = await fetchall(
        db,
        f"SELECT {RUN_FIELDS} FROM runs WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
        (conversation_id, limit),
    )
    return [rows.run_record(row) for row in found]


async def feedback(db: Db, reviewed: bool | None, limit: int, offset: int) -> list[FeedbackItem]:
    flag = None if reviewed is None else int(reviewed)
    found = await fetchall(db, queries.FEEDBACK_ITEMS.sqlite, (flag, limit, offset))
    return [queries.feedback_item(row) for row in found]


async def _review(db: Db, call: tuple[int, str, str, float]) -> None:
    found = await fetchall(db, queries.REVIEW_FEEDBACK.sqlite, call)
    if not found:
        raise KeyError(f"no run {call[0]}")


REVIEW: Op[Db, tuple[int, str, str, float], None] = Op("review_feedback", one=_review)
