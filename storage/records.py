"""The records the store's contract returns, and the errors it raises.

Owns: the frozen dataclasses `ConversationStore` methods hand back (conversations, messages,
compactions, runs, inbox items, audit entries, usage and feedback tallies, a channel's memory notes
and schedules), their literal types, a lease's `Fence` (the token a run's writes carry), and the
storage errors (`SchemaError`, `DatabaseDamaged`, `MemoryFull`, `TooManySchedules`,
`FencedOut`). Records carry `core` messages, never rows; `storage.rows`
makes them from rows. `storage.base` re-exports every name, so callers import them from there.

Must not: run SQL or know a backend; import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from core.messages import Message, Usage

RunOutcome: TypeAlias = Literal["running", "done", "error", "aborted", "interrupted"]
Vote: TypeAlias = Literal["up", "down"]


@dataclass(slots=True, frozen=True)
class Conversation:
    id: int
    key: str  # e.g. "slack:T1:C1:1700000000.000100", "terminal:default"
    channel_key: str  # the workspace scope: threads of one channel share it
    title: str | None
    settings: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(slots=True, frozen=True)
class StoredMessage:
    seq: int  # 1-based position in the conversation, gap-free
    message: Message


@dataclass(slots=True, frozen=True)
class Compaction:
    """A summary standing in for every message with `seq <= up_to_seq`."""

    id: int
    conversation_id: int
    summary: str
    up_to_seq: int
    created_at: float
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class LoadedConversation:
    """What a run starts from: the latest compaction (if any) and the messages after it."""

    conversation: Conversation
    compaction: Compaction | None
    messages: list[StoredMessage]

    @property
    def last_seq(self) -> int:
        if self.messages:
            return self.messages[-1].seq
        return self.compaction.up_to_seq if self.compaction else 0


@dataclass(slots=True, frozen=True)
class RunRecord:
    id: int
    conversation_id: int
    conversation_key: str
    outcome: RunOutcome
    started_at: float
    finished_at: float | None
    user_id: str | None
    channel_key: str | None
    model: str | None
    usage: Usage
    error: str | None
    surface_ref: dict[str, Any]  # where the run was shown (so a restart can report there)
    owner: dict[str, Any] = field(default_factory=dict)  # which process runs it (see runner)


@dataclass(slots=True, frozen=True)
class AuditEntry:
    """One line of the append-only audit log: who did what to what, when, from where."""

    id: int
    at: float  # the database's clock, epoch seconds
    actor: str  # "slack:U0123", "discord:123", "terminal:ann", "system"
    action: str  # "config.set", "memory.clear", "run.stop", "console.sign_in", …
    target: str  # a channel key, conversation key or run id
    origin: str  # "slack", "discord", "terminal", "console 10.0.0.7"
    detail: dict[str, Any]


@dataclass(slots=True, frozen=True)
class InboxItem:
    """A user message accepted for a conversation but not yet handed to the model.

    It enters history only when the loop delivers it (`deliver`), so history records the order
    the model saw; until then it survives restarts here.
    """

    id: int
    conversation_id: int
    message: Message  # the attributed user message
    surface_ref: dict[str, Any]  # where the sender was answered or acknowledged (may be {})
    received_at: float


@dataclass(slots=True, frozen=True)
class Accepted:
    """What `accept_delivery` did: the conversation, the new inbox item, and whether this was
    the conversation's first message (so the backfill, if any, was stored with it)."""

    conversation: Conversation
    item: InboxItem
    created: bool


@dataclass(slots=True, frozen=True)
class FeedbackTally:
    """The votes on one run: at most one per person, the latest counting."""

    up: int
    down: int


@dataclass(slots=True, frozen=True)
class UsageSummary:
    """What a scope (a channel, a conversation, a person) used since some moment: the ledger's
    totals, the runs started, and the 👍/👎 votes cast on its runs."""

    usage: Usage
    runs: int
    votes_up: int
    votes_down: int


@dataclass(slots=True, frozen=True)
class MemoryNote:
    """One note of a channel's memory (what people or the assistant asked it to keep)."""

    id: int
    channel_key: str
    text: str
    created_by: str | None  # a user id, or None for the assistant on nobody's behalf
    created_at: float


ScheduleState: TypeAlias = Literal["active", "done", "cancelled"]


@dataclass(slots=True, frozen=True)
class Schedule:
    """Work to run in a channel at set times: every time a 5-field `cron` expression matches
    in `timezone`, or once (`cron` None) at `next_run_at`. `next_run_at` is None once it will
    not run again (a one-off that ran, or a cancelled schedule).

    A claimed run is pending until it was handed to the runner: `pending_due_at` (when it was
    due), `pending_since` (when it was last claimed) and `pending_attempts` (claims so far), so
    a run whose process died, or whose thread the platform refused, is tried again."""

    id: int
    channel_key: str
    prompt: str
    cron: str | None
    timezone: str
    state: ScheduleState
    next_run_at: float | None
    last_run_at: float | None
    created_by: str
    created_by_name: str
    created_at: float
    pending_due_at: float | None = None
    pending_since: float | None = None
    pending_attempts: int = 0


@dataclass(slots=True, frozen=True)
class Fence:
    """The lease a run's writes are fenced with (several instances on one database): the
    conversation, this instance as its holder, and the epoch its acquisition got. The epoch
    grows whenever the lease changes hands, so a write carrying an older one is refused in
    the statement that would make it (docs/architecture.md, "Several instances")."""

    conversation_id: int
    holder: str
    epoch: int


class FencedOut(RuntimeError):
    """A run's write was refused, or its next step not taken: the lease it carries is no
    longer this instance's (another instance took the conversation over, or may have)."""

    def __init__(self, conversation_id: int, what: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"{what} refused: conversation {conversation_id}'s lease was lost")


class MemoryFull(ValueError):
    """The note would take the channel's memory past its bound (notes or characters)."""


class TooManySchedules(ValueError):
    """The channel already has as many active schedules as it may."""


class SchemaError(RuntimeError):
    """The database is not ours, or was written by a newer Teammate."""


class DatabaseDamaged(SchemaError):
    """The database file has damaged pages: it is refused, so nothing is written into it."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.path = path
        self.problems = list(problems)
        # SQLite's reports can be long and span lines: show the first, on one line.
        first = " ".join(self.problems[0].split()) if self.problems else "unknown damage"
        shown = first if len(first) <= 200 else first[:199] + "…"
        if len(self.problems) > 1:
            shown += f"; and {len(self.problems) - 1} more"
        super().__init__(
            f"{path} is damaged ({shown}); Teammate refuses to write into it and left it "
            "untouched. Run `teammate doctor` for the full check, then restore a backup or "
            f"recover what is readable with `sqlite3 {path} .recover` into a new file."
        )
