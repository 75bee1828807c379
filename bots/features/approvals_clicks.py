"""A press on an approval button, on any platform: the decision and the texts people get.

Owns: `ApprovalClick` (who pressed which choice on which request, from which channels, and
whether they are an admin there: the platform says so from the click's own user id) and
`approval_click`, which hands it to `Approvals.decide` and returns the private note for the
presser, if any (not an approver, decided already, unknown).

Must not: parse payloads, check a platform's access lists (the adapter refuses first), or
show anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bots.features.approvals import Approvals, decision_text
from bots.features.approvals_policy import waiting_for
from core.messages import Author

__all__ = ["UNKNOWN_APPROVAL_TEXT", "ApprovalClick", "approval_click"]

UNKNOWN_APPROVAL_TEXT = "I don't know that approval request (any more)."


@dataclass(slots=True, frozen=True)
class ApprovalClick:
    approval_id: int
    choice: Literal["approve", "deny", "rest"]
    by: Author
    is_admin: bool
    channel_keys: tuple[str, ...]


async def approval_click(approvals: Approvals, click: ApprovalClick) -> str | None:
    """Decide the request; the private note for the presser (None: decided, the request
    message shows it)."""
    outcome, record = await approvals.decide(
        click.approval_id,
        approve=click.choice != "deny",
        rest_of_run=click.choice == "rest",
        by=click.by,
        is_admin=click.is_admin,
        channel_keys=click.channel_keys,
    )
    if outcome == "decided":
        return None
    if outcome == "unknown" or record is None:
        return UNKNOWN_APPROVAL_TEXT
    if outcome == "not_allowed":
        asker = record.request.get("asker_name")
        who = waiting_for(str(record.request.get("approvers", "")), str(asker) if asker else None)
        return f"Only {who} can decide this request; your click was not counted."
    return f"This request was decided already. {decision_text(record)}"
