"""One queue and one task per surface, so saving messages never waits on a platform.

Owns: `SurfaceFeed`. The runner puts events (never awaits a surface); the feed's task shows
them in order, then closes the surface. After each event it compares `surface.ref` with the
last stored one and records a change with the run (`set_run_surface_ref`), so a restart can
edit the message a run posted.

Bounded: once `limit` events wait, further text deltas (`message_update`) are dropped and
counted; a surface still gets every other event, and `message_update.message` / `message_end`
always carry the whole reply so far. The other events are few per run (bounded by the turn cap
and the tools per turn).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from bots.surface import RunStarted, Surface, SurfaceEvent
from core.events import MessageUpdate

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1_000

RefChanged = Callable[[int, dict[str, Any]], Awaitable[object]]


class SurfaceFeed:
    """Feeds one surface in the background. `put` and `close` never block."""

    def __init__(
        self,
        surface: Surface,
        *,
        on_ref_change: RefChanged | None = None,
        limit: int = DEFAULT_LIMIT,
        name: str = "surface",
        run_id: int | None = None,
    ) -> None:
        self.surface = surface
        self.dropped_deltas = 0
        self._on_ref_change = on_ref_change
        self._limit = limit
        self._queue: deque[SurfaceEvent] = deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._run_id = run_id  # else learnt from the run_started it shows
        self._ref = self._read_ref()
        self.task = asyncio.create_task(self._pump(), name=f"feed:{name}")

    @property
    def ref(self) -> dict[str, Any]:
        return self._ref

    @property
    def closing(self) -> bool:
        return self._closing

    def put(self, event: SurfaceEvent) -> None:
        if self._closing:
            log.warning("event %s for a closed surface dropped", event.type)
            return
        if isinstance(event, MessageUpdate) and len(self._queue) >= self._limit:
            self.dropped_deltas += 1
            return
        self._queue.append(event)
        self._wake.set()

    def close(self) -> None:
        """Show what is queued, then close the surface (idempotent)."""
        self._closing = True
        self._wake.set()

    async def wait(self) -> None:
        await asyncio.shield(self.task)

    async def _pump(self) -> None:
        while True:
            while self._queue:
                event = self._queue.popleft()
                if isinstance(event, RunStarted):
                    self._run_id = event.run_id
                try:
                    await self.surface.emit(event)
                except Exception:
                    log.exception("surface failed to show %s", event.type)
                if self._ref_moved():
                    await self._record_ref()
            if self._closing:
                break
            self._wake.clear()
            await self._wake.wait()
        try:
            await self.surface.close()
        except Exception:
            log.exception("surface failed to close")
        if self._ref_moved():
            await self._record_ref()
        if self.dropped_deltas:
            log.info("a slow surface skipped %s text deltas", self.dropped_deltas)

    def _read_ref(self) -> dict[str, Any]:
        try:
            return dict(self.surface.ref)
        except Exception:
            log.exception("surface has no readable ref")
            return {}

    def _ref_moved(self) -> bool:
        try:
            return self.surface.ref != self._ref
        except Exception:
            return False

    async def _record_ref(self) -> None:
        self._ref = self._read_ref()
        ref = self._ref
        if self._run_id is None or self._on_ref_change is None:
            return
        try:
            await self._on_ref_change(self._run_id, ref)
        except Exception:
            log.exception("could not record the surface ref of run %s", self._run_id)
