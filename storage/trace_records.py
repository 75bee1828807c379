"""Records of what the console reads: run traces, search hits, conversations and feedback.

Owns: `TraceEvent` (one step of a run as the trace recorder stored it), `SearchHit`,
`ConversationFilter` and `ConversationSummary` (the Conversations page), `FeedbackItem` and
`FeedbackReview` (the Feedback page), and the bounds every backend applies to them. Re-exported
by `storage.base`.

Must not: import `tools` or `bots`; hold SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "MAX_SEARCH_RESULTS",
    "MAX_TRACE_DATA_BYTES",
    "AnswerTimings",
    "ConversationFilter",
    "ConversationSummary",
    "FeedbackItem",
    "FeedbackReview",
    "SearchHit",
    "TraceEvent",
    "TraceKind",
]

TraceKind: TypeAlias = Literal[
    "model_call",  # one model reply: tokens, cache, cost, duration, stop reason
    "tool_call",  # one tool call: label, arguments, result (bounded), duration, error
    "steer",  # a message steered into the running run, delivered to the model
    "stop",  # someone asked the run to stop (who)
    "compaction",  # older turns summarised before a model call
    "error",  # the run failed: its reference id and what people were told
    # the surface showed the run's end (duration: since the run started; its data's
    # `first_post_ms`: when the surface first showed anything of the run)
    "answer",
    "end",  # the run's outcome as the loop ended it
]
TRACE_KINDS: frozenset[str] = frozenset(TraceKind.__args__)  # type: ignore[attr-defined]

# A stored event's JSON is at most this long: the recorder truncates arguments and results to
# fit (with their full length noted), and a backend refuses anything longer.
MAX_TRACE_DATA_BYTES = 64 * 1024
# A search or a list returns at most this many rows, whatever a caller asks for.
MAX_SEARCH_RESULTS = 200


@dataclass(slots=True, frozen=True)
class TraceEvent:
    """One step of a run. `at`: the recording instance's clock (epoch seconds); `duration_ms`:
    a model or tool call's own, or for `answer` the time since the run started
    (measured on one instance's monotonic clock, so clock skew between hosts cannot show)."""

    run_id: int
    kind: TraceKind
    at: float
    duration_ms: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # its order within the run (set by the recorder)


@dataclass(slots=True, frozen=True)
class AnswerTimings:
    """How long people waited, over the runs whose answer was shown in a period: from a run's
    start to its first visible post and to its answer shown, p50 and p95 in milliseconds (None
    without runs). `runs`: how many answers the figures are over."""

    runs: int
    first_post_p50_ms: float | None
    first_post_p95_ms: float | None
    answer_p50_ms: float | None
    answer_p95_ms: float | None


@dataclass(slots=True, frozen=True)
class SearchHit:
    message_id: int
    conversation_id: int
    conversation_key: str
    channel_key: str
    seq: int
    role: str
    author_name: str | None
    created_at: float
    text: str  # the message's text (images left out), bounded


@dataclass(slots=True, frozen=True)
class ConversationFilter:
    """What the Conversations page narrows to; every field optional. `platform` is a key's
    prefix (`slack`, `discord`, `terminal`); `person` a run's `user_id`; `outcome` any run's;
    `feedback` a vote any run got; `since`/`until` bound `updated_at` (epoch seconds); `search`
    is full-text over the conversation's messages."""

    platform: str | None = None
    channel_key: str | None = None
    person: str | None = None
    outcome: str | None = None
    feedback: Literal["up", "down"] | None = None
    since: float | None = None
    until: float | None = None
    search: str | None = None


@dataclass(slots=True, frozen=True)
class ConversationSummary:
    id: int
    key: str
    channel_key: str
    title: str | None
    created_at: float
    updated_at: float
    runs: int
    last_outcome: str | None
    cost_usd: float
    ups: int
    downs: int


@dataclass(slots=True, frozen=True)
class FeedbackReview:
    reviewed_by: str
    note: str
    at: float


@dataclass(slots=True, frozen=True)
class FeedbackItem:
    """A run people voted on, with its conversation and, once reviewed, the review."""

    run_id: int
    conversation_key: str
    channel_key: str | None
    outcome: str
    started_at: float
    ups: int
    downs: int
    last_vote_at: float
    review: FeedbackReview | None
