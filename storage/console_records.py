"""What the console reads from the store, as records (both backends build the same ones).

Owns: `ConsoleOverview` (a period's runs, outcomes, people, votes, cost per day and channel,
time to answer), `ChannelActivity`, `ConsoleHealth` (the inbox, the runs in progress, leases
by holder, recent errors, the database's size) and their parts.

Must not: import `tools` or `bots`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class DayCost:
    day: str  # YYYY-MM-DD, UTC
    channel_key: str
    cost_usd: float


@dataclass(frozen=True, slots=True)
class ConsoleOverview:
    """Runs started in the period (answers: those done), the people who started them, votes
    cast in it on those runs, what the ledger charged in it, and how long answers took."""

    runs: int
    answers: int
    failures: int  # outcome "error"
    interruptions: int  # "interrupted" (a crash) and "aborted" (a stop)
    people: int
    votes_up: int
    votes_down: int
    cost_usd: float
    answer_p50_s: float | None
    answer_p95_s: float | None
    daily_cost: tuple[DayCost, ...] = ()


@dataclass(frozen=True, slots=True)
class ChannelActivity:
    channel_key: str
    conversations: int
    runs: int  # in the period
    cost_usd: float  # in the period
    last_active: float | None


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """An instance holding conversations' leases (several instances on PostgreSQL)."""

    holder: str
    leases: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class RunningRun:
    run_id: int
    conversation_key: str
    channel_key: str | None
    user_id: str | None
    model: str | None
    started_at: float
    owner: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RecentError:
    run_id: int
    conversation_key: str
    channel_key: str | None
    finished_at: float | None
    error: str


@dataclass(frozen=True, slots=True)
class ConsoleHealth:
    inbox_depth: int
    oldest_pending_at: float | None
    database_bytes: int | None
    running: tuple[RunningRun, ...]
    leases: tuple[LeaseHolder, ...]
    recent_errors: tuple[RecentError, ...]
