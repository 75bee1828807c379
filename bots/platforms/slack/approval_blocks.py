"""An approval request as Slack shows it: one message listing the calls, each with Approve,
Deny and "Approve the rest of this run" buttons, and each replaced by its decision.

Owns: the action ids and button values of approvals (`approval_value`, `parse_approval`),
the request message's blocks (`request_body`) and a request's block replaced by its decision
(`decided_blocks`). Everything shown is escaped: a command or argument cannot mention anyone.

Must not: decide anything, or call Slack.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from bots.platforms.slack.blocks import MessageBody, context_mrkdwn, escape, truncate
from bots.surface.contract import ApprovalRequested

__all__ = [
    "APPROVAL_ACTION_IDS",
    "APPROVAL_BLOCK_PREFIX",
    "Choice",
    "approval_value",
    "decided_blocks",
    "parse_approval",
    "request_body",
]

Choice = Literal["approve", "deny", "rest"]
APPROVAL_ACTION_IDS: dict[Choice, str] = {
    "approve": "teammate_approve",
    "deny": "teammate_deny",
    "rest": "teammate_approve_rest",
}
APPROVAL_BLOCK_PREFIX = "teammate_approval_"
_VALUE = re.compile(r"(approve|deny|rest):([0-9]{1,18})")
_SECTION_LIMIT = 2_900  # Slack's 3,000 characters of a section's text, less a margin


def approval_value(choice: Choice, approval_id: int) -> str:
    return f"{choice}:{approval_id}"


def parse_approval(value: object) -> tuple[Choice, int] | None:
    """(choice, approval id) of a button's value, or None for anything else."""
    if not isinstance(value, str):
        return None
    matched = _VALUE.fullmatch(value)
    if matched is None:
        return None
    choice: Choice = matched.group(1)  # type: ignore[assignment]
    return choice, int(matched.group(2))


def request_body(event: ApprovalRequested) -> MessageBody:
    """The request message: who it waits for, then each call and its buttons."""
    head = f"⏸️ Waiting for {escape(event.waiting_for)} to approve before this runs:"
    shown: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": head}}]
    for view in event.requests:
        title = f"*{escape(view.tool_name)}*: {escape(view.label)}"
        text = truncate(f"{title}\n{escape(view.preview)}", _SECTION_LIMIT)
        shown.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
        shown.append(_buttons(view.approval_id))
    return MessageBody(truncate(head, 300), shown)


def decided_blocks(
    current: list[dict[str, Any]], approval_id: int, text: str
) -> list[dict[str, Any]]:
    """The message's blocks with the request's buttons replaced by its decision."""
    block_id = f"{APPROVAL_BLOCK_PREFIX}{approval_id}"
    return [
        context_mrkdwn(escape(text)) | {"block_id": block_id}
        if block.get("block_id") == block_id
        else block
        for block in current
    ]


def _buttons(approval_id: int) -> dict[str, Any]:
    def button(choice: Choice, label: str, style: str | None) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "type": "button",
            "action_id": APPROVAL_ACTION_IDS[choice],
            "text": {"type": "plain_text", "text": label, "emoji": True},
            "value": approval_value(choice, approval_id),
        }
        return shown | ({"style": style} if style else {})

    return {
        "type": "actions",
        "block_id": f"{APPROVAL_BLOCK_PREFIX}{approval_id}",
        "elements": [
            button("approve", "Approve", "primary"),
            button("deny", "Deny", "danger"),
            button("rest", "Approve the rest of this run", None),
        ],
    }
