"""Several instances on one database: what this one hears from the others, and the sweep.

Owns: listening to other instances' notifications (a message accepted there for a
conversation driven here is taken in and steered; a stop for one driven here is carried out; a
lease lost stops the run and hands the inbox over; after a reconnection every inbox is read
again), publishing a stop for a conversation driven elsewhere, and the sweep that looks for
what dead instances left behind (`recover()` every few seconds). On a single-process store
none of this runs.

Must not: take or release a conversation's lease (drivers do), or repair runs itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bots.inbox import ConversationState, Queued
from bots.runner.driver import Drivers
from bots.runner.shared import Shared
from bots.runner.texts import LEASE_LOST_TEXT
from core.messages import Author
from storage.base import LeaseLost, NewInboxItem, Notification, Resync, StopRequest

__all__ = ["TAKEOVER_SWEEP_S", "Instances", "stop_reason"]

log = logging.getLogger(__name__)

# How often each instance looks for conversations a dead instance left behind.
TAKEOVER_SWEEP_S = 15.0


def stop_reason(by: Author | None) -> str:
    return f"Stopped by {by.name}." if by is not None else "Stopped on request."


class Instances:
    """This instance's side of the conversation with the others."""

    def __init__(self, shared: Shared, drivers: Drivers) -> None:
        self._shared = shared
        self._drivers = drivers
        self._listening = False

    def start(self, recover: Callable[[], Awaitable[object]]) -> None:
        """Listen, and sweep with `recover`, until the runner closes (once; only when the
        store is shared by several instances)."""
        if self._shared.instances.shared and not self._listening:
            self._listening = True
            self._shared.spawn(self._listen())
            self._shared.spawn(self._sweep(recover))

    def publish_stop(self, conversation_key: str, run_id: int | None, by: Author | None) -> None:
        """Ask the instance driving the conversation to stop it there."""
        self._shared.spawn(
            self._shared.instances.publish_stop(
                conversation_key,
                run_id,
                by_id=by.id if by is not None else None,
                by_name=by.name if by is not None else None,
            )
        )

    async def _listen(self) -> None:
        """Act on what other instances tell this one, until the runner closes."""
        async for notice in self._shared.instances.notifications():
            try:
                await self._on_notice(notice)
            except Exception:
                log.exception("could not act on %s", notice)

    async def _on_notice(self, notice: Notification) -> None:
        active = self._shared.active
        if isinstance(notice, NewInboxItem):
            state = active.get(notice.conversation_key)
            if state is not None and notice.item_id not in state.seen:
                await self._take_in(state)
        elif isinstance(notice, StopRequest):
            if notice.conversation_key in active:
                by = (
                    Author(id=notice.by_id, name=notice.by_name or notice.by_id)
                    if notice.by_id
                    else None
                )
                self._drivers.stop(notice.conversation_key, notice.run_id, stop_reason(by))
        elif isinstance(notice, LeaseLost):
            for state in list(active.values()):
                if state.conversation.id == notice.conversation_id:
                    if state.run is not None:
                        # It stops at once and quietly; its driver then lets go.
                        state.run.fence_out(LEASE_LOST_TEXT)
                    else:
                        self._drivers.hand_over(state)
        elif isinstance(notice, Resync):
            for state in list(active.values()):
                await self._take_in(state)

    async def _take_in(self, state: ConversationState) -> None:
        """Messages another instance accepted for a conversation this one runs: into the
        inbox, and steered into the current run as if they had arrived here."""
        shared = self._shared
        key = state.conversation.key
        for item in await shared.store.pending(state.conversation.id):
            if item.id in state.seen:
                continue
            state.seen.add(item.id)
            surface = shared.surface_for(key, item.surface_ref)
            queued = Queued(item, shared.feed(key, surface) if surface is not None else None)
            state.inbox[item.id] = queued
            if state.run is not None:
                state.run.steer(queued)

    async def _sweep(self, recover: Callable[[], Awaitable[object]]) -> None:
        """Take over what dead instances left: their runs and unanswered messages."""
        while not self._shared.closing:
            lease_s = self._shared.settings.instance_lease_s
            await asyncio.sleep(min(TAKEOVER_SWEEP_S, lease_s / 2))
            try:
                await recover()
            except Exception:
                log.exception("looking for conversations left by dead instances failed")
