"""The store's contract for run traces, search and the console's conversation and feedback
reads: a part of `storage.base.ConversationStore` (which extends it), kept here so the
contract's module stays small.

Owns: `TraceStore`, the protocol those methods make (bounds: `storage.trace_records`).

Must not: import `tools` or `bots`; hold SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from storage.records import RunRecord
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    SearchHit,
    TraceEvent,
)


class TraceStore(Protocol):
    """Run traces, search, and the Conversations and Feedback pages' reads."""

    # run traces, search and the console's reads (storage.trace_records has the bounds)
    async def append_trace_events(self, events: Sequence[TraceEvent]) -> None:
        """Store trace events, bounded; those of a run that no longer exists are skipped."""
        ...

    async def run_traces(self, run_ids: Sequence[int], *, limit: int = ...) -> list[TraceEvent]:
        """The runs' trace events, by run then in the order recorded, at most `limit`."""
        ...

    async def search_messages(
        self, query: str, *, limit: int, channel_key: str | None = None
    ) -> list[SearchHit]:
        """User and assistant messages holding every word of `query` (any query syntax in
        it is searched as text, never obeyed), the newest first, bounded."""
        ...

    async def catch_up_search(self, *, limit: int = ...) -> int:
        """Index for search the messages appended since the last call, in one go per
        `limit` (SQLite: they are not indexed one by one as they are appended; a search
        catches up first. PostgreSQL indexes each as it is written: 0)."""
        ...

    async def console_conversations(
        self, wanted: ConversationFilter, *, limit: int, before: tuple[float, int] | None = None
    ) -> list[ConversationSummary]:
        """Conversations matching `wanted`, the most recently updated first, bounded;
        `before` is the previous page's last `(updated_at, id)`."""
        ...

    async def conversation_runs(self, conversation_id: int, *, limit: int) -> list[RunRecord]:
        """The conversation's runs, the newest first, bounded."""
        ...

    async def feedback_items(
        self, *, limit: int, offset: int = 0, reviewed: bool | None = None
    ) -> list[FeedbackItem]:
        """Runs people voted on, those with a 👎 first, then the latest vote first."""
        ...

    async def review_feedback(self, run_id: int, *, by: str, note: str) -> None:
        """Mark a run's feedback reviewed with a note (a later review replaces it);
        `KeyError` for an unknown run."""
        ...

    async def answer_timings(
        self, *, since: float, channel_key: str | None = None, platform: str | None = None
    ) -> AnswerTimings:
        """Time to the first visible post and to the answer, p50/p95, over the answers shown
        since `since` (the newest 100,000 at most), in one channel or on one platform."""
        ...
