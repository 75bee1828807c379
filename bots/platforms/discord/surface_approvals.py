"""Approval requests in a Discord conversation, as part of a run's surface.

Owns: `ApprovalMessages`, the part of `DiscordSurface` that posts a request (one message per
five calls of a batch: Discord's five rows of buttons; each call with Approve, Deny and
"Approve the rest of this run"), saying who the run waits for, and edits it as each call is
decided (approved, denied, timed out, cancelled by a stop) and by whom, its buttons gone then.
Nothing in it pings anyone.

Must not: decide anything (bots.features.approvals does), or show the answer itself.
"""

from __future__ import annotations

import logging

import discord

from bots.platforms.discord.buttons import approval_view
from bots.platforms.discord.surface_posted import NO_MENTIONS, Posted, Poster
from bots.surface.contract import ApprovalDecided, ApprovalRequested

log = logging.getLogger(__name__)

MAX_CONTENT = 2_000  # Discord's characters of a message
PER_MESSAGE = 5  # rows of buttons in one message
_MARKS = {"approved": "✅", "denied": "🚫", "timed_out": "⌛", "cancelled": "⏹️"}


class _Request:
    """One posted request message: its calls in order, and what each says."""

    def __init__(self, head: str, calls: list[tuple[int, str]]) -> None:
        self.head = head
        self.order = [approval_id for approval_id, _ in calls]
        self.lines = dict(calls)
        self.open = set(self.order)
        self.posted: Posted | None = None

    def content(self) -> str:
        room = (MAX_CONTENT - len(self.head) - 10) // max(1, len(self.order))
        parts = [self.head, *(_cut(self.lines[i], room) for i in self.order)]
        return "\n".join(parts)[:MAX_CONTENT]

    def view(self) -> discord.ui.View | None:
        still = [i for i in self.order if i in self.open]
        return approval_view(still) if still else None


class ApprovalMessages:
    """A base of `DiscordSurface`: its `_poster` is the surface's."""

    _poster: Poster

    @property
    def _requests(self) -> dict[int, _Request]:
        found: dict[int, _Request] | None = self.__dict__.get("_approval_requests")
        if found is None:
            found = self.__dict__["_approval_requests"] = {}
        return found

    async def on_approval_requested(self, event: ApprovalRequested) -> None:
        head = f"⏸️ Waiting for {event.waiting_for} to approve before this runs:"
        views = list(event.requests)
        for start in range(0, len(views), PER_MESSAGE):
            chunk = views[start : start + PER_MESSAGE]
            request = _Request(
                head,
                [(v.approval_id, f"**{v.tool_name}**: {v.label}\n{v.preview}") for v in chunk],
            )
            try:
                request.posted = await self._poster.send(request.content(), view=request.view())
            except discord.HTTPException:
                log.warning("the approval request of run %s could not be posted", event.run_id)
                continue
            for view in chunk:
                self._requests[view.approval_id] = request

    async def on_approval_decided(self, event: ApprovalDecided) -> None:
        request = self._requests.pop(event.approval_id, None)
        if request is None or request.posted is None:
            return
        request.open.discard(event.approval_id)
        request.lines[event.approval_id] = f"{_MARKS.get(event.state, 'ℹ️')} {event.text}"
        view = request.view()
        await request.posted.edit(
            content=request.content(), view=view, allowed_mentions=NO_MENTIONS
        )


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 5)]
    return cut + ("\n```" if cut.count("```") % 2 else "") + "…"
