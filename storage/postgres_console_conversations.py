"""The PostgreSQL store's calls for the console: run traces, search and the console's reads.

Owns: `PostgresConsole`, the part of `PostgresStore` (a base beside
`postgres_channel_data.PostgresChannelData`) with those contract methods, each running its
call on a pooled connection through `postgres_traces`, which owns their SQL.

Must not: hold SQL; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage import console_queries as queries
from storage import postgres_traces as traces
from storage.postgres_connections import PostgresConnections
from storage.records import RunRecord
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    SearchHit,
    TraceEvent,
)


class PostgresConsoleConversations(PostgresConnections):
    """Traces, search and the console's reads (a base of `PostgresStore`)."""

    async def append_trace_events(self, events: Sequence[TraceEvent]) -> None:
        """Store trace events (bounded: see `storage.trace_records`); events of a run that
        no longer exists are skipped."""
        checked = [queries.checked_trace(e) for e in events]
        if checked:
            await self._call(lambda connection: traces.append(connection, checked))

    async def run_traces(
        self, run_ids: Sequence[int], *, limit: int = queries.MAX_TRACE_READ
    ) -> list[TraceEvent]:
        """The runs' trace events, by run then in the order recorded, at most `limit`."""
        if not run_ids:
            return []
        bound = max(1, min(limit, queries.MAX_TRACE_READ))
        return await self._call(lambda connection: traces.traces(connection, run_ids, bound))

    async def search_messages(
        self, query: str, *, limit: int, channel_key: str | None = None
    ) -> list[SearchHit]:
        """Messages holding every word of `query` (any syntax in it is searched as text),
        the newest first, at most `limit` (bounded)."""
        terms = queries.search_terms(query)
        if not terms:
            return []
        bound = queries.bounded(limit)
        return await self._call(
            lambda connection: traces.search(connection, terms, channel_key, bound)
        )

    async def catch_up_search(self, *, limit: int = queries.CATCH_UP_LIMIT) -> int:
        """Nothing to do: the `search` column is generated as each message is written."""
        del limit
        return 0

    async def console_conversations(
        self,
        wanted: ConversationFilter,
        *,
        limit: int,
        before: tuple[float, int] | None = None,
    ) -> list[ConversationSummary]:
        """Conversations matching `wanted`, the most recently updated first (bounded)."""
        return await self._call(
            lambda connection: traces.conversations(connection, wanted, limit, before)
        )

    async def answer_timings(
        self, *, since: float, channel_key: str | None = None, platform: str | None = None
    ) -> AnswerTimings:
        """Time to the first visible post and to the answer, p50/p95, since `since`."""
        return await self._call(
            lambda connection: traces.timings(connection, since, channel_key, platform)
        )

    async def conversation_runs(self, conversation_id: int, *, limit: int) -> list[RunRecord]:
        """The conversation's runs, the newest first (bounded)."""
        bound = queries.bounded(limit)
        return await self._call(
            lambda connection: traces.conversation_runs(connection, conversation_id, bound)
        )

    async def feedback_items(
        self, *, limit: int, offset: int = 0, reviewed: bool | None = None
    ) -> list[FeedbackItem]:
        """Runs people voted on, 👎 first, then the latest vote first (bounded)."""
        bound, start = queries.bounded(limit), max(0, min(offset, queries.MAX_OFFSET))
        return await self._call(
            lambda connection: traces.feedback(connection, reviewed, bound, start)
        )

    async def review_feedback(self, run_id: int, *, by: str, note: str) -> None:
        """Mark the run's feedback reviewed with a note (a later review replaces it);
        `KeyError` for an unknown run."""
        note, by = queries.checked_review(note, by)
        now = self._clock()
        await self._call(lambda connection: traces.review(connection, run_id, by, note, now))
