"""What a conversation's driver holds: its inbox of accepted messages and its current run.

Owns: `Queued` (an accepted message with its sender's surface), `RunState` (a run's record id,
surface, loop control, the steered messages by identity, and whether its lease was lost),
`ConversationState` (the inbox in arrival order, messages being dropped by a stop, the current
run, the driver task, whether a run of it was fenced out) and `Unseen`
(a surface for a sender nobody can show anything to any more). The runner (`bots.runner`) is
the only user; nothing here awaits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bots.surface.contract import SurfaceEvent
from bots.surface.feed import SurfaceFeed
from core.loop import RunControl
from core.messages import Author, UserMessage
from storage.base import Conversation, InboxItem, RunRecord

QUOTE_CHARS = 60


class Queued:
    """An accepted message waiting in a conversation's inbox, with its sender's surface."""

    __slots__ = ("feed", "item")

    def __init__(self, item: InboxItem, feed: SurfaceFeed | None) -> None:
        self.item = item
        self.feed = feed

    @property
    def author(self) -> Author | None:
        message = self.item.message
        return message.author if isinstance(message, UserMessage) else None

    def quote(self) -> str:
        said = self.item.message.text().split("\n", 1)[-1].strip()
        said = " ".join(said.split())
        if len(said) > QUOTE_CHARS:
            said = said[: QUOTE_CHARS - 1] + "…"
        who = f"{self.author.name}: " if self.author else ""
        return f"{who}“{said}”"


class RunState:
    """The run a driver is working on: its record, surface and loop control."""

    def __init__(self, feed: SurfaceFeed) -> None:
        self.id: int | None = None
        self.feed = feed
        self.control: RunControl | None = None  # one per attempt, made when it starts
        self.stop_reason: str | None = None
        self.accepting = False  # the loop is running and takes steering
        # Steered messages by identity: the loop's message_end names the very object.
        self.steered: dict[int, Queued] = {}
        # Its lease was lost (several instances): another instance owns the conversation, so
        # the run does nothing more, shows nothing more (bots.runner.fencing).
        self.fenced_out = False

    def new_control(self) -> RunControl:
        """A fresh control for an attempt (a retry never inherits the last one's steering)."""
        self.control = RunControl()
        self.steered = {}
        if self.stop_reason is not None:
            self.control.cancel(self.stop_reason)
        return self.control

    def steer(self, queued: Queued) -> None:
        if self.accepting and self.control is not None:
            self.steered[id(queued.item.message)] = queued
            self.control.steer(queued.item.message)

    def fence_out(self, reason: str) -> None:
        """The lease is lost: stop the loop now (its tool calls too), quietly."""
        self.fenced_out = True
        self.cancel(reason)

    def cancel(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.control is not None:  # else the next attempt's control starts cancelled
            self.control.cancel(reason)


class ConversationState:
    """A conversation with a driver: its inbox (arrival order) and its current run."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.inbox: dict[int, Queued] = {}
        # Every item this driver ever took in: a notification or a re-read of the store
        # (several instances) never brings one twice.
        self.seen: set[int] = set()
        self.dropping: list[Queued] = []  # stopped: to be dropped and told
        self.drop_reason = ""
        self.run: RunState | None = None
        self.lease_lost = False  # a run was fenced out: the driver lets go of the conversation
        self.resume: RunRecord | None = None  # a run left waiting for approval: continued first
        self.task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()


class Unseen:
    """Where a run goes whose sender can no longer be shown anything (after a restart)."""

    def __init__(self, ref: dict[str, Any]) -> None:
        self._ref = ref

    @property
    def ref(self) -> dict[str, Any]:
        return self._ref

    async def emit(self, event: SurfaceEvent) -> None:
        return None

    async def close(self) -> None:
        return None
