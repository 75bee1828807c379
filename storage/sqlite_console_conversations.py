"""The SQLite store's calls for the console: run traces, search and the console's reads.

Owns: `SqliteConsole`, the part of `SqliteStore` (its base, after
`sqlite_connections.SqliteConnections`) with those contract methods, each handing its call to
`sqlite_traces`, which owns their SQL. Trace appends go through the writer's batcher: appends
made while others run are one `executemany`.

Must not: hold SQL; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage import console_queries as queries
from storage import sqlite_traces as traces
from storage.records import RunRecord
from storage.sqlite_connections import SqliteConnections
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    SearchHit,
    TraceEvent,
)


class SqliteConsoleConversations(SqliteConnections):
    """Traces, search and the console's reads (`SqliteStore`'s base)."""

    async def append_trace_events(self, events: Sequence[TraceEvent]) -> None:
        """Store trace events (bounded: see `storage.trace_records`); events of a run that
        no longer exists are skipped."""
        batch = [queries.checked_trace(e) for e in events]
        if batch:
            await self._write(traces.APPEND_TRACE, batch)

    async def run_traces(
        self, run_ids: Sequence[int], *, limit: int = queries.MAX_TRACE_READ
    ) -> list[TraceEvent]:
        """The runs' trace events, by run then in the order recorded, at most `limit`."""
        if not run_ids:
            return []
        bound = max(1, min(limit, queries.MAX_TRACE_READ))
        return await self._read(lambda db: traces.read_traces(db, run_ids, bound))

    async def search_messages(
        self, query: str, *, limit: int, channel_key: str | None = None
    ) -> list[SearchHit]:
        """Messages holding every word of `query` (any syntax in it is searched as text),
        the newest first, at most `limit` (bounded)."""
        terms = queries.search_terms(query)
        if not terms:
            return []
        bound = queries.bounded(limit)
        await self.catch_up_search()
        return await self._read(lambda db: traces.search(db, terms, channel_key, bound))

    async def catch_up_search(self, *, limit: int = queries.CATCH_UP_LIMIT) -> int:
        """Index messages appended since the last call (at most `limit`); how many."""
        total = 0
        while True:
            done = await self._write(traces.CATCH_UP, max(1, limit))
            total += done
            if done < limit:
                return total

    async def console_conversations(
        self,
        wanted: ConversationFilter,
        *,
        limit: int,
        before: tuple[float, int] | None = None,
    ) -> list[ConversationSummary]:
        """Conversations matching `wanted`, the most recently updated first (bounded)."""
        if wanted.search:
            await self.catch_up_search()
        return await self._read(lambda db: traces.conversations(db, wanted, limit, before))

    async def answer_timings(
        self, *, since: float, channel_key: str | None = None, platform: str | None = None
    ) -> AnswerTimings:
        """Time to the first visible post and to the answer, p50/p95, since `since`."""
        return await self._read(lambda db: traces.timings(db, since, channel_key, platform))

    async def conversation_runs(self, conversation_id: int, *, limit: int) -> list[RunRecord]:
        """The conversation's runs, the newest first (bounded)."""
        bound = queries.bounded(limit)
        return await self._read(lambda db: traces.conversation_runs(db, conversation_id, bound))

    async def feedback_items(
        self, *, limit: int, offset: int = 0, reviewed: bool | None = None
    ) -> list[FeedbackItem]:
        """Runs people voted on, 👎 first, then the latest vote first (bounded)."""
        bound, start = queries.bounded(limit), max(0, min(offset, queries.MAX_OFFSET))
        return await self._read(lambda db: traces.feedback(db, reviewed, bound, start))

    async def review_feedback(self, run_id: int, *, by: str, note: str) -> None:
        """Mark the run's feedback reviewed with a note (a later review replaces it);
        `KeyError` for an unknown run."""
        note, by = queries.checked_review(note, by)
        await self._write(traces.REVIEW, (run_id, by, note, self._clock()))
