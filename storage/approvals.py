"""Approval requests as both backends store them: the record, its statements, its rows.

Owns: `ApprovalRecord` and `ApprovalState`, reading a row into a record, and the bound on a
stored request (`request_json`); the statements are `storage.approvals_sql`'s. A request is
one tool call of one run waiting for a person's yes.

Must not: run SQL or know a driver; import `tools` or `bots`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "APPROVAL_COLUMNS",
    "APPROVAL_STATES",
    "ApprovalRecord",
    "ApprovalState",
    "approval_from",
]

ApprovalState: TypeAlias = Literal["pending", "approved", "denied", "timed_out", "cancelled"]
APPROVAL_STATES: tuple[ApprovalState, ...] = (
    "pending",
    "approved",
    "denied",
    "timed_out",
    "cancelled",
)
MAX_REQUEST_CHARS = 64_000  # the stored request (what is shown, who may decide), as JSON


@dataclass(slots=True, frozen=True)
class ApprovalRecord:
    """One tool call waiting for (or given) a person's decision.

    `request` is what the request shows and who may decide, as the caller stored it (a JSON
    object); `decided_by` is the platform user id of whoever decided (None: the clock or the
    system did)."""

    id: int
    conversation_id: int
    conversation_key: str
    channel_key: str
    run_id: int
    call_id: str
    tool_name: str
    request: dict[str, Any]
    state: ApprovalState
    requested_at: float
    expires_at: float
    decided_by: str | None
    decided_by_name: str | None
    decided_at: float | None

    @property
    def pending(self) -> bool:
        return self.state == "pending"


APPROVAL_COLUMNS = (
    "id, conversation_id, conversation_key, channel_key, run_id, call_id, tool_name, request, "
    "state, requested_at, expires_at, decided_by, decided_by_name, decided_at"
)


def approval_from(row: Sequence[Any]) -> ApprovalRecord:
    (ident, conversation_id, conversation_key, channel_key, run_id, call_id, tool_name) = row[:7]
    request, state, requested_at, expires_at, by, by_name, decided_at = row[7:14]
    loaded = json.loads(str(request))
    return ApprovalRecord(
        id=int(ident),
        conversation_id=int(conversation_id),
        conversation_key=str(conversation_key),
        channel_key=str(channel_key),
        run_id=int(run_id),
        call_id=str(call_id),
        tool_name=str(tool_name),
        request=loaded if isinstance(loaded, dict) else {},
        state=state if state in APPROVAL_STATES else "cancelled",
        requested_at=float(requested_at),
        expires_at=float(expires_at),
        decided_by=None if by is None else str(by),
        decided_by_name=None if by_name is None else str(by_name),
        decided_at=None if decided_at is None else float(decided_at),
    )


def request_json(request: dict[str, Any]) -> str:
    """The request as stored; `ValueError` past the bound (nothing is stored then)."""
    text = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    if len(text) > MAX_REQUEST_CHARS:
        raise ValueError(f"an approval request is at most {MAX_REQUEST_CHARS} characters")
    return text
