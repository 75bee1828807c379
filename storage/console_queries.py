"""The console's queries both backends run alike, written once: the Conversations page's
filtered list, the Feedback page, a review, and full-text query words made safe.

Owns: `conversations_query` (a filter to one statement: the newest conversations first,
keyset-paged, their runs, cost and votes counted for the page's rows only), `FEEDBACK_ITEMS`,
`REVIEW_FEEDBACK`, and `search_terms` / `fts5_query` (a person's words as FTS5 phrases, so no
query syntax reaches the engine). Statements are written with `$n` placeholders, rendered for
SQLite by `storage.statements.sql`.

Must not: run SQL or know a driver; import `tools` or `bots`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from core.messages import AssistantMessage, UserMessage, load_message
from storage.statements import Sql, sql
from storage.trace_records import (
    MAX_SEARCH_RESULTS,
    MAX_TRACE_DATA_BYTES,
    TRACE_KINDS,
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    FeedbackReview,
    SearchHit,
    TraceEvent,
)

__all__ = [
    "FEEDBACK_ITEMS",
    "REVIEW_FEEDBACK",
    "SEARCH_SELECT",
    "conversation_summary",
    "conversations_query",
    "feedback_item",
    "fts5_query",
    "message_text",
    "search_hit",
    "search_terms",
    "trace_event",
]

Backend = Literal["sqlite", "postgres"]

# A query keeps at most this many words, each at most this long: a pasted page cannot make
# the engine's work grow without bound.
MAX_TERMS = 8
MAX_TERM_CHARS = 64
# How many matching messages a conversation filter looks at (the newest).
SEARCH_SCAN = 5_000
_WORD = re.compile(r"\w", re.UNICODE)
_PLATFORM = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def search_terms(query: str) -> list[str]:
    """The words of `query` worth searching for (each holds a letter or digit), bounded."""
    words = [w[:MAX_TERM_CHARS] for w in query[: MAX_TERMS * MAX_TERM_CHARS * 2].split()]
    return [w for w in words if _WORD.search(w)][:MAX_TERMS]


def fts5_query(terms: list[str]) -> str:
    """Each term as an FTS5 phrase (quotes doubled): every term must match, and operators,
    column filters and parentheses a person typed are searched for as text, never obeyed."""
    return " ".join('"' + term.replace('"', '""') + '"' for term in terms)


# A search hit carries at most this much of its message's text.
MAX_HIT_CHARS = 2_000


def message_text(body: str) -> str:
    """A stored message's text (images and tool calls left out), bounded."""
    message = load_message(body)
    text = message.text() if isinstance(message, UserMessage | AssistantMessage) else ""
    return text[:MAX_HIT_CHARS]


def bounded(limit: int) -> int:
    return max(1, min(int(limit), MAX_SEARCH_RESULTS))


def conversations_query(
    wanted: ConversationFilter,
    *,
    limit: int,
    before: tuple[float, int] | None,
    backend: Backend,
) -> tuple[str, list[Any]]:
    """One statement for the Conversations page and its arguments. `before` is the last
    row's `(updated_at, id)` on the previous page."""
    where: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    if wanted.platform:
        if not _PLATFORM.match(wanted.platform):
            raise ValueError(f"not a platform: {wanted.platform[:40]!r}")
        where.append(f"c.key LIKE {arg(wanted.platform + ':%')}")
    if wanted.channel_key:
        where.append(f"c.channel_key = {arg(wanted.channel_key)}")
    if wanted.since is not None:
        where.append(f"c.updated_at >= {arg(float(wanted.since))}")
    if wanted.until is not None:
        where.append(f"c.updated_at < {arg(float(wanted.until))}")
    if wanted.person:
        where.append(
            "EXISTS (SELECT 1 FROM runs r WHERE r.conversation_id = c.id "
            f"AND r.user_id = {arg(wanted.person)})"
        )
    if wanted.outcome:
        where.append(
            "EXISTS (SELECT 1 FROM runs r WHERE r.conversation_id = c.id "
            f"AND r.outcome = {arg(wanted.outcome)})"
        )
    if wanted.feedback:
        if wanted.feedback not in ("up", "down"):
            raise ValueError("feedback is 'up' or 'down'")
        where.append(
            "EXISTS (SELECT 1 FROM runs r JOIN run_feedback f ON f.run_id = r.id "
            f"WHERE r.conversation_id = c.id AND f.vote = {arg(wanted.feedback)})"
        )
    if wanted.search:
        terms = search_terms(wanted.search)
        if not terms:
            where.append("1 = 0")  # nothing searchable: nothing matches
        elif backend == "sqlite":
            where.append(
                "c.id IN (SELECT m.conversation_id FROM messages m WHERE m.id IN ("
                f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH {arg(fts5_query(terms))} "
                f"ORDER BY rowid DESC LIMIT {SEARCH_SCAN}))"
            )
        else:
            where.append(
                "c.id IN (SELECT m.conversation_id FROM messages m "
                f"WHERE m.search @@ plainto_tsquery('simple', {arg(' '.join(terms))}))"
            )
    if before is not None:
        at, last_id = before
        where.append(f"(c.updated_at, c.id) < ({arg(float(at))}, {arg(int(last_id))})")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    # The page's rows first, then their counts: the correlated sums run for those rows only.
    text = f"""
        SELECT c.id, c.key, c.channel_key, c.title, c.created_at, c.updated_at,
            (SELECT count(*) FROM runs r WHERE r.conversation_id = c.id),
            (SELECT r.outcome FROM runs r WHERE r.conversation_id = c.id
                ORDER BY r.id DESC LIMIT 1),
            (SELECT COALESCE(SUM(r.cost_usd), 0) FROM runs r WHERE r.conversation_id = c.id),
            (SELECT count(*) FROM run_feedback f JOIN runs r ON r.id = f.run_id
                WHERE r.conversation_id = c.id AND f.vote = 'up'),
            (SELECT count(*) FROM run_feedback f JOIN runs r ON r.id = f.run_id
                WHERE r.conversation_id = c.id AND f.vote = 'down')
        FROM (SELECT id, key, channel_key, title, created_at, updated_at FROM conversations c
              {clause} ORDER BY c.updated_at DESC, c.id DESC LIMIT {arg(bounded(limit))}) c
        ORDER BY c.updated_at DESC, c.id DESC
    """
    rendered = sql(text)
    return (rendered.sqlite if backend == "sqlite" else rendered.postgres), args


def conversation_summary(row: Any) -> ConversationSummary:
    return ConversationSummary(
        id=int(row[0]),
        key=str(row[1]),
        channel_key=str(row[2]),
        title=row[3],
        created_at=float(row[4]),
        updated_at=float(row[5]),
        runs=int(row[6]),
        last_outcome=None if row[7] is None else str(row[7]),
        cost_usd=float(row[8]),
        ups=int(row[9]),
        downs=int(row[10]),
    )


# Runs people voted on, 👎 first, then the latest vote first: $1 reviewed (NULL: any,
# 0: not yet, 1: reviewed), $2 limit, $3 offset.
FEEDBACK_ITEMS: Sql = sql(
    """
    SELECT r.id, c.key, r.channel_key, r.outcome, r.started_at, v.ups, v.downs, v.last_at,
        fr.reviewed_by, fr.note, fr.at
    FROM (SELECT run_id,
            SUM(CASE WHEN vote = 'up' THEN 1 ELSE 0 END) AS ups,
            SUM(CASE WHEN vote = 'down' THEN 1 ELSE 0 END) AS downs,
            MAX(at) AS last_at
          FROM run_feedback GROUP BY run_id) v
    JOIN runs r ON r.id = v.run_id
    JOIN conversations c ON c.id = r.conversation_id
    LEFT JOIN feedback_reviews fr ON fr.run_id = r.id
    WHERE CAST($1 AS INTEGER) IS NULL
        OR (CASE WHEN fr.run_id IS NULL THEN 0 ELSE 1 END) = CAST($1 AS INTEGER)
    ORDER BY CASE WHEN v.downs > 0 THEN 0 ELSE 1 END, v.last_at DESC, r.id DESC
    LIMIT $2 OFFSET $3
    """
)


def feedback_item(row: Any) -> FeedbackItem:
    review = None
    if row[8] is not None:
        review = FeedbackReview(reviewed_by=str(row[8]), note=str(row[9]), at=float(row[10]))
    return FeedbackItem(
        run_id=int(row[0]),
        conversation_key=str(row[1]),
        channel_key=row[2],
        outcome=str(row[3]),
        started_at=float(row[4]),
        ups=int(row[5]),
        downs=int(row[6]),
        last_vote_at=float(row[7]),
        review=review,
    )


# Marks a run's feedback reviewed (a later review replaces it): $1 run, $2 by, $3 note, $4 now.
# No row back: the run does not exist.
REVIEW_FEEDBACK: Sql = sql(
    """
    INSERT INTO feedback_reviews (run_id, reviewed_by, note, at)
    SELECT id, $2, $3, $4 FROM runs WHERE id = $1
    ON CONFLICT (run_id) DO UPDATE
        SET reviewed_by = excluded.reviewed_by, note = excluded.note, at = excluded.at
    RETURNING run_id
    """
)


SEARCH_SELECT = (
    "SELECT m.id, m.conversation_id, c.key, c.channel_key, m.seq, m.role, m.author_name, "
    "m.created_at, m.body FROM messages m JOIN conversations c ON c.id = m.conversation_id "
)


def trace_event(row: Sequence[Any]) -> TraceEvent:
    data = row[5]
    return TraceEvent(
        run_id=int(row[0]),
        seq=int(row[1]),
        kind=row[2],
        at=float(row[3]),
        duration_ms=None if row[4] is None else float(row[4]),
        data=json.loads(data) if isinstance(data, str) else dict(data),
    )


def search_hit(row: Sequence[Any]) -> SearchHit:
    return SearchHit(
        message_id=int(row[0]),
        conversation_id=int(row[1]),
        conversation_key=str(row[2]),
        channel_key=str(row[3]),
        seq=int(row[4]),
        role=str(row[5]),
        author_name=row[6],
        created_at=float(row[7]),
        text=message_text(row[8]),
    )


CATCH_UP_LIMIT = 5_000  # messages indexed per transaction (SQLite)
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # made once: cheaper
MAX_TRACE_READ = 5_000  # events read back at most per call (a page shows a few runs)
MAX_NOTE_CHARS = 2_000  # a review's note
MAX_OFFSET = 10_000


def checked_trace(event: TraceEvent) -> tuple[Any, ...]:
    """`event` as a backend stores it: `(run_id, seq, kind, at, duration_ms, data JSON)`, of a
    known kind and with data within the bound (else only a note of its size is kept: the
    recorder bounds first, so this is a last guard)."""
    if event.kind not in TRACE_KINDS:
        raise ValueError(f"not a trace kind: {str(event.kind)[:40]!r}")
    data = _COMPACT.encode(event.data)
    if len(data) > MAX_TRACE_DATA_BYTES:
        data = json.dumps({"omitted": f"{len(data)} bytes, over the bound"})
    return (event.run_id, event.seq, event.kind, event.at, event.duration_ms, data)


MAX_TIMINGS = 100_000  # answers the percentiles are computed over at most (the newest)


def timings_query(
    since: float, channel_key: str | None, platform: str | None, backend: Backend
) -> tuple[str, list[Any]]:
    """The answers shown since `since` (optionally in one channel, or on one platform): their
    answer and first-post durations."""
    first_post = (
        "json_extract(t.data, '$.first_post_ms')"
        if backend == "sqlite"
        else "(t.data->>'first_post_ms')::float8"
    )
    args: list[Any] = [float(since)]
    where = ["t.kind = 'answer'", "t.at >= $1"]
    if channel_key:
        args.append(channel_key)
        where.append(f"r.channel_key = ${len(args)}")
    if platform:
        if not _PLATFORM.match(platform):
            raise ValueError(f"not a platform: {platform[:40]!r}")
        args.append(platform + ":%")
        where.append(f"r.channel_key LIKE ${len(args)}")
    text = sql(
        f"SELECT t.duration_ms, {first_post} FROM run_trace t JOIN runs r ON r.id = t.run_id "
        f"WHERE {' AND '.join(where)} ORDER BY t.at DESC LIMIT {MAX_TIMINGS}"
    )
    return (text.sqlite if backend == "sqlite" else text.postgres), args


def answer_timings(rows: Sequence[Any]) -> AnswerTimings:
    """p50/p95 (nearest rank) of the rows' answer and first-post durations."""
    answers = sorted(float(r[0]) for r in rows if r[0] is not None)
    posts = sorted(float(r[1]) for r in rows if r[1] is not None)
    return AnswerTimings(
        runs=len(answers),
        first_post_p50_ms=_rank(posts, 0.5),
        first_post_p95_ms=_rank(posts, 0.95),
        answer_p50_ms=_rank(answers, 0.5),
        answer_p95_ms=_rank(answers, 0.95),
    )


def _rank(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, max(0, int(q * len(values) + 0.999999) - 1))]


def checked_review(note: str, by: str) -> tuple[str, str]:
    if not by.strip():
        raise ValueError("a review names who made it")
    return note[:MAX_NOTE_CHARS], by[:200]
