"""The store's contract: what the runner may ask of persisted conversations.

Owns: the `ConversationStore` protocol. `InstanceCoordination` (leases, their fencing and
notifications when several instances share a database; `SingleProcess` for a store one
process owns) is `storage.coordination`; the records and errors are `storage.records`; both
are re-exported here: callers import every name from `storage.base`. Every backend (`sqlite`,
`postgres`) implements the protocol. Records carry `core` messages, never rows; nothing
outside `storage/` writes SQL. Described in docs/architecture.md ("The contracts", "Several
instances").

Must not: import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from core.messages import Message, Usage
from storage.approvals import ApprovalRecord, ApprovalState
from storage.approvals_contract import ApprovalStore
from storage.console_records import (
    ChannelActivity,
    ConsoleHealth,
    ConsoleOverview,
    DayCost,
    LeaseHolder,
    RecentError,
    RunningRun,
)
from storage.coordination import (
    InstanceCoordination,
    LeaseLost,
    NewInboxItem,
    Notification,
    Resync,
    SingleProcess,
    StopRequest,
    coordination_of,
)
from storage.records import (
    Accepted,
    AuditEntry,
    Compaction,
    Conversation,
    DatabaseDamaged,
    FeedbackTally,
    Fence,
    FencedOut,
    InboxItem,
    LoadedConversation,
    MemoryFull,
    MemoryNote,
    RunOutcome,
    RunRecord,
    Schedule,
    ScheduleState,
    SchemaError,
    StoredMessage,
    TooManySchedules,
    UsageSummary,
    Vote,
)
from storage.trace_contract import TraceStore
from storage.trace_records import (
    AnswerTimings,
    ConversationFilter,
    ConversationSummary,
    FeedbackItem,
    FeedbackReview,
    SearchHit,
    TraceEvent,
    TraceKind,
)

__all__ = [
    "Accepted",
    "AnswerTimings",
    "ApprovalRecord",
    "ApprovalState",
    "AuditEntry",
    "ChannelActivity",
    "Compaction",
    "ConsoleHealth",
    "ConsoleOverview",
    "Conversation",
    "ConversationFilter",
    "ConversationStore",
    "ConversationSummary",
    "DatabaseDamaged",
    "DayCost",
    "FeedbackItem",
    "FeedbackReview",
    "FeedbackTally",
    "Fence",
    "FencedOut",
    "InboxItem",
    "InstanceCoordination",
    "LeaseHolder",
    "LeaseLost",
    "LoadedConversation",
    "MemoryFull",
    "MemoryNote",
    "NewInboxItem",
    "Notification",
    "RecentError",
    "Resync",
    "RunOutcome",
    "RunRecord",
    "RunningRun",
    "Schedule",
    "ScheduleState",
    "SchemaError",
    "SearchHit",
    "SingleProcess",
    "StopRequest",
    "StoredMessage",
    "TooManySchedules",
    "TraceEvent",
    "TraceKind",
    "UsageSummary",
    "Vote",
    "coordination_of",
]


class ConversationStore(TraceStore, ApprovalStore, Protocol):
    """Persisted conversations. All methods commit before they return.

    Each method is one transaction that runs whole or not at all, even if its caller is
    cancelled midway (a cancelled append may still have happened). Methods given an unknown
    conversation or run id raise `KeyError` (`messages_after` returns `[]` instead).

    Fencing: the writes a run makes take `fence`, the lease its instance holds (None: no
    lease, as on a store one process owns). On a shared store the write is conditioned, in
    the statement that makes it, on that lease still being this holder's at that epoch; if it
    is not, nothing is written and `FencedOut` is raised. A store one process owns has no
    other writer to fence out and ignores it.
    """

    async def close(self) -> None: ...

    # conversations
    async def get_or_create_conversation(
        self, key: str, *, channel_key: str, title: str | None = None
    ) -> Conversation: ...
    async def get_conversation(self, key: str) -> Conversation | None: ...
    async def channel_conversations(self, channel_key: str, *, limit: int) -> list[Conversation]:
        """The channel's conversations, the most recently created first, at most `limit`."""
        ...

    async def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> Conversation: ...

    # messages: append-only, each committed when appended
    async def append_message(
        self,
        conversation_id: int,
        message: Message,
        *,
        run_id: int | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        fence: Fence | None = None,
    ) -> StoredMessage:
        """Append `message` as the next seq. With `usage` (a model reply's; needs `run_id`),
        also record it in the ledger in the same transaction, unless it used no tokens."""
        ...

    async def load(self, conversation_id: int) -> LoadedConversation: ...
    async def messages_after(self, conversation_id: int, seq: int) -> list[StoredMessage]: ...
    async def message_count(self, conversation_id: int) -> int: ...

    # deliveries: durable de-duplication of incoming platform events
    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat."""
        ...

    async def prune_deliveries(self, older_than_s: float) -> int: ...

    # the inbox: accepted user messages waiting for the conversation's driver
    async def accept_delivery(
        self,
        conversation_key: str,
        message: Message,
        *,
        channel_key: str,
        delivery_id: str | None,
        backfill: Sequence[Message] = (),
        title: str | None = None,
        surface_ref: dict[str, Any] | None = None,
        also_claim: Sequence[str] = (),
    ) -> Accepted | None:
        """ONE transaction: claim `delivery_id` (None: no de-duplication; a repeat returns None
        and changes nothing); get or create the conversation; if it has no history and no inbox
        items yet, append `backfill` to its history (so two concurrent first messages store it
        once, and `created` is True); add `message` to its inbox.

        `also_claim`: more ids naming the same delivery (Slack: the event id beside the
        channel+ts key), claimed in the same transaction; if any one of `delivery_id` and
        these was claimed before, it is a repeat: None, and nothing is claimed or stored."""
        ...

    async def pending(self, conversation_id: int) -> list[InboxItem]:
        """Inbox items neither delivered nor dropped, in arrival order (survives restarts)."""
        ...

    async def pending_conversations(self) -> list[int]:
        """Ids of conversations with pending inbox items, oldest item first (for recovery)."""
        ...

    async def deliver(
        self,
        conversation_id: int,
        item_ids: Sequence[int],
        *,
        run_id: int | None = None,
        fence: Fence | None = None,
    ) -> list[StoredMessage]:
        """ONE transaction: append the items' messages to history in the order given (the
        order the loop delivered them to the model) and mark them delivered. Items already
        delivered or dropped are skipped (idempotent). Unknown ids raise `KeyError`."""
        ...

    async def drop(
        self,
        conversation_id: int,
        item_ids: Sequence[int],
        reason: str,
        *,
        fence: Fence | None = None,
    ) -> None:
        """Mark pending items as not to be answered (e.g. a stop); they never enter history.
        Items already delivered or dropped are left as they are. Unknown ids raise
        `KeyError`."""
        ...

    # runs
    async def start_run(
        self,
        conversation_id: int,
        *,
        user_id: str | None = None,
        channel_key: str | None = None,
        model: str | None = None,
        surface_ref: dict[str, Any] | None = None,
        owner: dict[str, Any] | None = None,
        deliver: Sequence[int] = (),
        fence: Fence | None = None,
    ) -> RunRecord:
        """Record a run as "running"; `channel_key` defaults to the conversation's. `owner`
        identifies the process running it, for crash recovery. `deliver`: inbox items to
        deliver to the new run in the same transaction (as `deliver` would, same errors)."""
        ...

    async def finish_run(
        self,
        run_id: int,
        outcome: RunOutcome,
        *,
        error: str | None = None,
        fence: Fence | None = None,
    ) -> RunRecord:
        """Close a run, totalling its usage from the ledger. The first finish wins: finishing
        a finished run returns it unchanged. `outcome="running"` raises `ValueError`."""
        ...

    async def set_run_surface_ref(
        self, run_id: int, ref: dict[str, Any], *, fence: Fence | None = None
    ) -> RunRecord:
        """Replace where a run is shown (e.g. a Slack message ts known after the first post),
        so a restart can edit that message."""
        ...

    async def running_runs(self) -> list[RunRecord]:
        """Runs still marked running: at start-up, the ones a crash interrupted."""
        ...

    # compactions
    async def add_compaction(
        self,
        conversation_id: int,
        summary: str,
        up_to_seq: int,
        details: dict[str, Any] | None = None,
        *,
        fence: Fence | None = None,
    ) -> Compaction: ...

    # the usage ledger: one entry per model reply, attributed to run, conversation, user, channel
    async def record_usage(
        self, run_id: int, usage: Usage, *, model: str | None = None
    ) -> None: ...
    async def usage_since(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> Usage: ...

    async def usage_summary(
        self,
        since: float,
        *,
        conversation_id: int | None = None,
        user_id: str | None = None,
        channel_key: str | None = None,
    ) -> UsageSummary:
        """`usage_since` with the same filters, plus the runs started at or after `since` and
        the votes cast at or after `since` on runs in scope (a run's user and channel), all
        from one snapshot: e.g. a channel's day for `/teammate usage`."""
        ...

    # feedback: one vote per person per run, changeable
    async def set_run_feedback(
        self, run_id: int, user_id: str, vote: Vote | None, *, channel_key: str | None = None
    ) -> FeedbackTally:
        """Record `user_id`'s vote on a run, replacing their earlier one (None withdraws it);
        returns the run's tally after the change. Unknown run, or with `channel_key` a run of
        another channel: `KeyError`; a vote other than "up", "down" or None: `ValueError`."""
        ...

    # per-channel configuration set at run time (e.g. by a channel admin's slash command),
    # layered over the configuration file by the caller; it survives restarts
    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The stored configuration of a channel, or None if none was ever set."""
        ...

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration (a JSON object) wholesale, recording
        who changed it and when. Values must be JSON-serialisable (`TypeError` otherwise)."""
        ...

    # a channel's memory: short notes shown to the model with every run in the channel
    async def memory_notes(self, channel_key: str) -> list[MemoryNote]:
        """The channel's notes, oldest first."""
        ...

    async def add_memory_note(
        self, channel_key: str, text: str, *, by: str | None, max_notes: int, max_chars: int
    ) -> MemoryNote:
        """Add a note, unless the channel would then hold more than `max_notes` notes or
        more than `max_chars` characters in all: `MemoryFull` then, and nothing changes
        (checked and written in one transaction, so concurrent adds cannot pass the bound)."""
        ...

    async def forget_memory_note(self, channel_key: str, note_id: int) -> bool:
        """Delete the channel's note `note_id`; False if the channel has no such note (a note
        of another channel is never touched)."""
        ...

    async def clear_memory(self, channel_key: str) -> int:
        """Delete every note of the channel; how many there were."""
        ...

    # scheduled work
    async def add_schedule(
        self,
        channel_key: str,
        *,
        prompt: str,
        cron: str | None,
        timezone: str,
        next_run_at: float,
        by_id: str,
        by_name: str,
        max_active: int,
    ) -> Schedule:
        """Store an active schedule, unless the channel has `max_active` already:
        `TooManySchedules` then, and nothing changes (one transaction)."""
        ...

    async def schedules(self, channel_key: str) -> list[Schedule]:
        """The channel's active schedules, oldest first."""
        ...

    async def cancel_schedule(self, channel_key: str, schedule_id: int) -> bool:
        """Cancel the channel's active schedule; False if it has no such active schedule."""
        ...

    async def due_schedules(self, now: float, *, limit: int) -> list[Schedule]:
        """Active schedules whose `next_run_at` is at or before `now`, earliest first."""
        ...

    async def claim_schedule(
        self, schedule_id: int, *, due_at: float, next_run_at: float | None, now: float
    ) -> Schedule | None:
        """Take the run due at `due_at`: iff the schedule is still active and still due at
        exactly `due_at`, move it to `next_run_at` (None: it is done), note the run as pending
        (claimed at `now`, attempt 1) and return it; else None. One conditional statement: of
        several instances claiming one run, one wins."""
        ...

    async def unsettled_schedule_runs(self, claimed_before: float, *, limit: int) -> list[Schedule]:
        """Schedules not cancelled whose pending run was claimed at or before `claimed_before`
        and never settled (its process died, or starting it failed), oldest claim first."""
        ...

    async def reclaim_schedule_run(
        self, schedule_id: int, *, due_at: float, since: float, now: float
    ) -> Schedule | None:
        """Take a pending run again to retry it: iff it is still pending at `due_at`, claimed at
        `since`, and the schedule is not cancelled, mark it claimed at `now` (one more attempt)
        and return it; else None. Of several instances, one wins."""
        ...

    async def settle_schedule_run(self, schedule_id: int, *, due_at: float) -> bool:
        """The run due at `due_at` was handed to the runner (or given up): no longer pending.
        False if that run was not pending (settled already, or replaced by a later one)."""
        ...

    # the audit log: append-only (the tables refuse UPDATE and DELETE)
    async def append_audit(
        self, *, actor: str, action: str, target: str, origin: str, detail: Mapping[str, Any]
    ) -> int:
        """Write one entry, stamped with the database's clock; its id. Callers go through
        `bots.features.audit.record_action`, which masks secrets and bounds sizes."""
        ...

    async def audit_entries(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
    ) -> list[AuditEntry]:
        """Entries newest first (at most `limit`, capped at 1,000), older than `before_id`
        when given (the next page), narrowed by every filter given."""
        ...

    # the console (bots.console): its session secret, one-time links, and its reads
    async def console_secret(self, candidate: str) -> str:
        """The console's session secret: `candidate` if none was kept yet, else the kept one
        (every instance of a shared database signs alike)."""
        ...

    async def add_console_link(self, token_hash: str, person: str, *, expires_at: float) -> None:
        """Keep a one-time sign-in link (by its token's hash) for `person`."""
        ...

    async def use_console_link(self, token_hash: str, *, now: float) -> str | None:
        """The link's person, once: None if it is unknown, used or expired at `now`."""
        ...

    async def console_overview(
        self, *, since: float, platform: str | None = None, channel_key: str | None = None
    ) -> ConsoleOverview:
        """Runs started, votes cast and usage charged at or after `since`, narrowed to a
        platform (channel keys `platform:…`) and/or a channel when given."""
        ...

    async def console_channels(self, *, since: float, limit: int) -> list[ChannelActivity]:
        """Every channel with conversations or a stored configuration (runs and cost since
        `since`), the most recently active first, at most `limit`."""
        ...

    async def console_health(self, *, errors_limit: int) -> ConsoleHealth:
        """The inbox's depth, runs in progress, live leases by holder, the last
        `errors_limit` failed runs, the database's size."""
        ...

    async def now(self) -> float:
        """The database's time (epoch seconds): the one clock every instance of a shared store
        reads alike, for stamps another instance compares (a schedule run's claim). SQLite is
        on one host, so its clock is the store's own; PostgreSQL answers with its own."""
        ...
