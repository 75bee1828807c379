"""The store's contract for approvals: a part of `storage.base.ConversationStore` (which
extends it), kept here so the contract's module stays small.

Owns: `ApprovalStore`, the protocol of a tool call waiting for a person's yes
(`bots.features.approvals`): stored pending, decided once.

Must not: import `tools` or `bots`; hold SQL.
"""

from __future__ import annotations

from typing import Any, Protocol

from storage.approvals import ApprovalRecord, ApprovalState


class ApprovalStore(Protocol):
    """Pending approval requests and their one decision."""

    # approvals: a tool call waiting for a person's yes (bots.features.approvals)
    async def add_approval(
        self,
        *,
        conversation_id: int,
        conversation_key: str,
        channel_key: str,
        run_id: int,
        call_id: str,
        tool_name: str,
        request: dict[str, Any],
        now: float,
        expires_at: float,
    ) -> ApprovalRecord:
        """Store a pending request for the call, or return the one stored for it already (a
        resumed run asks again: the first request, and any decision, stand). A request over
        its bound as JSON: `ValueError`, nothing stored."""
        ...

    async def approval(self, approval_id: int) -> ApprovalRecord | None: ...

    async def run_approvals(self, run_id: int) -> list[ApprovalRecord]:
        """The run's requests, oldest first."""
        ...

    async def pending_approvals(self, *, limit: int) -> list[ApprovalRecord]:
        """Requests still pending, oldest first."""
        ...

    async def decide_approval(
        self,
        approval_id: int,
        state: ApprovalState,
        *,
        by: str | None,
        by_name: str | None,
        now: float,
    ) -> ApprovalRecord | None:
        """Decide a pending request; the decided record, or None if it was not pending (one
        conditional UPDATE: of any number of deciders, on any instances, one wins)."""
        ...
