"""Approval requests in a Slack thread, as part of a run's surface.

Owns: `ApprovalMessages`, the part of `SlackSurface` that posts a request message (one per
batch, each call with its buttons), says in the status line who the run waits for, and
replaces a call's buttons with its decision and who made it (approved, denied, timed out,
or cancelled by a stop), wherever the decision was made.

Must not: decide anything (bots.features.approvals does), or show the answer itself.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bots.platforms.slack import approval_blocks
from bots.platforms.slack.blocks import MessageBody
from bots.platforms.slack.surface_calls import TRANSPORT_ERRORS, ThreadCalls
from bots.surface.contract import ApprovalDecided, ApprovalRequested

log = logging.getLogger(__name__)


class _Posted:
    def __init__(self, ts: str, body: MessageBody) -> None:
        self.ts = ts
        self.blocks: list[dict[str, Any]] = body.blocks
        self.text = body.text


class ApprovalMessages:
    """A base of `SlackSurface`: its `_calls` and `_want_status` are the surface's."""

    _calls: ThreadCalls
    _want_status: Callable[[str], None]

    @property
    def _approval_posts(self) -> dict[int, _Posted]:
        posts: dict[int, _Posted] | None = self.__dict__.get("_approval_posts_by_id")
        if posts is None:
            posts = self.__dict__["_approval_posts_by_id"] = {}
        return posts

    async def on_approval_requested(self, event: ApprovalRequested) -> None:
        body = approval_blocks.request_body(event)
        self._want_status(f"Waiting for {event.waiting_for} to approve…")
        ts = None
        with contextlib.suppress(SlackApiError, *TRANSPORT_ERRORS):
            ts = await self._calls.post(body, part="approval")
        if ts is None:
            log.warning("the approval request of run %s could not be posted", event.run_id)
            return
        posted = _Posted(ts, body)
        for view in event.requests:
            self._approval_posts[view.approval_id] = posted

    async def on_approval_decided(self, event: ApprovalDecided) -> None:
        posted = self._approval_posts.pop(event.approval_id, None)
        if posted is None:
            return
        mark = {"approved": "✅", "denied": "🚫", "timed_out": "⌛", "cancelled": "⏹️"}
        text = f"{mark.get(event.state, 'ℹ️')} {event.text}"
        posted.blocks = approval_blocks.decided_blocks(posted.blocks, event.approval_id, text)
        if not any(p is posted for p in self._approval_posts.values()):
            self._want_status("Working…")
        await self._calls.update(posted.ts, MessageBody(posted.text, posted.blocks))
