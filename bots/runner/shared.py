"""What the runner's parts share in one process.

Owns: the map of conversations with a driver (`active`), the surface feeds still showing, per
conversation (what `wait()` waits for), surfaces rebuilt from a stored ref and a run's surface
ref stored under its lease (several instances: fenced like its other writes), the closing flag,
background tasks kept by name, and dropping messages a stop took off an inbox (the driver and a
run's end both do it). Also the result types of `submit` and `stop`.

Must not: start runs or drivers, take leases, or hold anything about one run (a run's state is
built fresh for each run: `bots.runner.run`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Literal, TypeAlias

from bots.features.approvals import Approvals
from bots.inbox import ConversationState, Queued
from bots.settings import Settings
from bots.surface.contract import Notice, Surface, SurfaceFactory
from bots.surface.feed import SurfaceFeed
from bots.traces.recorder import TraceRecorder
from bots.workspaces import Workspaces
from storage.base import ConversationStore, Fence, InstanceCoordination

__all__ = ["FINAL_SHOWN_WAIT_S", "Shared", "StopResult", "SubmitResult", "acknowledge"]

log = logging.getLogger(__name__)

SubmitResult: TypeAlias = Literal["started", "steered", "duplicate", "refused"]
StopResult: TypeAlias = Literal["stopped", "stale", "idle"]

# How long a run's end may take to show before the run is closed in the store anyway.
FINAL_SHOWN_WAIT_S = 30.0


class Shared:
    """The state every part of one runner reads and changes (all on one event loop)."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        settings: Settings,
        instances: InstanceCoordination,
        surfaces: SurfaceFactory | None,
        traces: TraceRecorder | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        # Several instances on one database (docs/architecture.md, "Several instances"): a
        # lease per conversation and notifications; a single-process store grants every lease.
        self.instances = instances
        self.workspaces = Workspaces(settings.workspaces_dir)
        self.approvals = Approvals(store)  # requests waiting for people (its own no-op if unset)
        self.active: dict[str, ConversationState] = {}
        self.feeds: dict[str, set[SurfaceFeed]] = {}  # still showing, per conversation
        self.closing = False
        self.background: set[asyncio.Task[None]] = set()
        self._surfaces = surfaces
        self.traces = traces  # sees every feed's events: the run traces (bots.traces)
        self._fences: dict[int, Fence] = {}  # by run, while its feed shows it

    def feed(self, key: str, surface: Surface, *, run_id: int | None = None) -> SurfaceFeed:
        feed = SurfaceFeed(
            surface, on_ref_change=self._ref_changed, name=key, run_id=run_id, tap=self.traces
        )
        feeds = self.feeds.setdefault(key, set())
        feeds.add(feed)

        def forget(_finished: asyncio.Future[None]) -> None:
            feeds.discard(feed)
            if not feeds and self.feeds.get(key) is feeds:
                del self.feeds[key]

        feed.finished.add_done_callback(forget)
        return feed

    def fence_refs(self, run_id: int, fence: Fence | None, feed: SurfaceFeed) -> None:
        """Store the run's surface ref under `fence` while `feed` shows it."""
        if fence is None:
            return
        self._fences[run_id] = fence
        feed.finished.add_done_callback(lambda _done: self._fences.pop(run_id, None))

    async def _ref_changed(self, run_id: int, ref: dict[str, Any]) -> None:
        await self.store.set_run_surface_ref(run_id, ref, fence=self._fences.get(run_id))

    def surface_for(self, key: str, ref: dict[str, Any]) -> Surface | None:
        if self._surfaces is None or not ref:
            return None
        try:
            return self._surfaces.for_ref(key, ref)
        except Exception:
            log.exception("no surface for %s", key)
            return None

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def drop(
        self, state: ConversationState, run_feed: SurfaceFeed | None, fence: Fence | None
    ) -> None:
        """Drop stopped messages for good and tell everyone which ones go unanswered."""
        dropped, state.dropping = state.dropping, []
        if not dropped:
            return
        reason = state.drop_reason
        ids = [q.item.id for q in dropped]
        await self.store.drop(state.conversation.id, ids, reason, fence=fence)
        if run_feed is not None:
            quotes = "; ".join(q.quote() for q in dropped)
            run_feed.put(
                Notice(
                    f"{reason} These messages will not be answered: {quotes}. "
                    "Send them again if you still need an answer.",
                    "warning",
                )
            )
        for queued in dropped:
            if queued.feed is not None and queued.feed is not run_feed:
                text = f"{reason} I won't answer {queued.quote()}; send it again if needed."
                queued.feed.put(Notice(text, "warning", audience=queued.author))
                queued.feed.close()


def acknowledge(queued: Queued, text: str, ack: Literal["queued", "read"] | None = None) -> None:
    """Tell a message's sender `text` (`ack`: an acknowledgement a platform may show quietly),
    and let its surface go."""
    if queued.feed is not None:
        queued.feed.put(Notice(text, "info", audience=queued.author, ack=ack))
        queued.feed.close()
