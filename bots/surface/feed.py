"""One queue per surface, so saving messages never waits on a platform.

Owns: `SurfaceFeed`. The runner puts events (never awaits a surface). The feed's own task,
started when an event arrives and gone once the queue is shown, shows them in order, then
closes the surface: no surface code runs in the caller's task, so a surface's timeout or
failure (a timer records the task it runs in) is that surface's alone, and a slow surface
never delays the runner. An event is shown one loop turn after it is put, at the cost of
a task per burst of events. After each event the feed compares `surface.ref` with
the last stored one and records a change with the run (`set_run_surface_ref`), so a restart
can edit the message a run posted.

Bounded: once `limit` events wait (the one being shown counts), further text deltas
(`message_update`) are dropped and counted; a surface still gets every other event, and
`message_update.message` / `message_end` always carry the whole reply so far. A tool's partial
results (`tool_execution_update`) are snapshots, each superseding the last: at most one per
tool call waits, the newest (a chatty command behind a slow surface no longer grows the queue).
The other events are few per run (bounded by the turn cap and the tools per turn).

A `FeedTap` (the trace recorder: `bots.traces`) sees each event as it is put (but those it
has no use for: a reply's deltas and a tool's partial results, starts and turn ends), and hears when
the surface first showed something of a run and when it showed the run's end; it must not
block or raise (a failure is logged and the surface goes on).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bots.surface.contract import Checkpointed, RunFinished, RunStarted, Surface, SurfaceEvent
from core.events import (
    AgentStart,
    MessageStart,
    MessageUpdate,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
)

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1_000

RefChanged = Callable[[int, dict[str, Any]], Awaitable[object]]
ShownMoment = Literal["first_post", "answer"]
# Shown, these count as the run's first visible post even if the surface's ref never moves.
_VISIBLE = (MessageUpdate, ToolExecutionStart, RunFinished)
# The many deltas of a reply: a tap never sees them (a trace keeps the reply, not its stream).
_UNTAPPED = (MessageUpdate, ToolExecutionUpdate, AgentStart, MessageStart, TurnEnd)


class FeedTap(Protocol):
    """Sees a feed's events (`bots.traces.TraceRecorder`). Never blocks, never raises."""

    def put(self, run_id: int | None, event: SurfaceEvent) -> None: ...
    def shown(self, run_id: int, moment: ShownMoment) -> None: ...


@dataclass(slots=True, frozen=True)
class _NewestUpdate:
    """Where a tool call's partial result waits in the queue: shown as the newest snapshot
    of that call when its turn comes."""

    tool_call_id: str


class SurfaceFeed:
    """Feeds one surface, in order. `put` and `close` never block; `finished` is done once
    the surface is closed."""

    def __init__(
        self,
        surface: Surface,
        *,
        on_ref_change: RefChanged | None = None,
        limit: int = DEFAULT_LIMIT,
        name: str = "surface",
        run_id: int | None = None,
        tap: FeedTap | None = None,
    ) -> None:
        self.surface = surface
        self.dropped_deltas = 0
        self.coalesced_updates = 0
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._on_ref_change = on_ref_change
        self._limit = limit
        self._name = name
        self._queue: deque[SurfaceEvent | _NewestUpdate] = deque()
        self._newest_update: dict[str, ToolExecutionUpdate] = {}  # by call, while one waits
        self._task: asyncio.Task[None] | None = None  # only while events wait or show
        self._showing = False  # an event is being shown (it counts towards `limit`)
        self._closing = False
        self._abandoned = False
        self._run_id = run_id  # else learnt from the run_started it shows
        self._tap = tap
        self._put_run_id = run_id  # the run of the events put (the shown one may lag)
        self._posted = False  # the run's first visible post was reported to the tap
        self._ref = self._read_ref()
        if isinstance(surface, Checkpointed):
            surface.set_checkpoint(self._checkpoint)

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
        if self._tap is not None and not isinstance(event, _UNTAPPED):
            if isinstance(event, RunStarted):
                self._put_run_id = event.run_id
            self._tell(lambda tap: tap.put(self._put_run_id, event))
        if isinstance(event, MessageUpdate) and self.waiting >= self._limit:
            self.dropped_deltas += 1
            return
        if isinstance(event, ToolExecutionUpdate):
            waiting = event.tool_call_id in self._newest_update
            self._newest_update[event.tool_call_id] = event
            if waiting:
                self.coalesced_updates += 1
                return
            self._queue.append(_NewestUpdate(event.tool_call_id))
        else:
            self._queue.append(event)
        self._pump_soon()

    @property
    def waiting(self) -> int:
        """Events queued or being shown."""
        return len(self._queue) + self._showing

    def close(self) -> None:
        """Show what is queued, then close the surface (idempotent)."""
        if self._closing:
            return
        self._closing = True
        self._pump_soon()

    def abandon(self) -> None:
        """Show nothing more and let the surface go without closing it: another instance
        owns the run now and shows its end in the same place (a close here would show this
        run ending, over that)."""
        self._queue.clear()
        self._newest_update.clear()
        self._abandoned = self._closing = True
        if self._task is None:
            self._finish()

    async def wait(self) -> None:
        await asyncio.shield(self.finished)

    def _pump_soon(self) -> None:
        """The feed's own task shows every event: no surface code ever runs in the caller's
        task (a timeout a surface starts, as aiohttp's request timer does, records the task
        it runs in, and cancels that one when it fires)."""
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name=self._label())

    async def _pump(self) -> None:
        """Show the queue in order, and close the surface once asked and the queue is shown."""
        try:
            while self._queue:
                event = self._take(self._queue.popleft())
                self._note_run(event)
                self._showing = True
                try:
                    await _guarded(self.surface.emit(event), f"show {event.type}")
                finally:
                    self._showing = False
                moved = self._ref_moved()
                if self._tap is not None and (not self._posted or isinstance(event, RunFinished)):
                    self._note_shown(event, moved)
                if moved and not self._abandoned:
                    await self._record_ref()
            if self._abandoned:
                self._finish()
            elif self._closing:
                await _guarded(self.surface.close(), "close")
                if self._ref_moved():
                    await self._record_ref()
                self._finish()
        except asyncio.CancelledError:
            self.finished.cancel()
            raise
        finally:
            self._task = None  # no await after the queue was found empty: `put` starts anew

    def _take(self, queued: SurfaceEvent | _NewestUpdate) -> SurfaceEvent:
        if isinstance(queued, _NewestUpdate):
            return self._newest_update.pop(queued.tool_call_id)
        return queued

    def _finish(self) -> None:
        if self.dropped_deltas or self.coalesced_updates:
            log.info(
                "a slow surface skipped %s text deltas and %s superseded tool updates",
                self.dropped_deltas,
                self.coalesced_updates,
            )
        if not self.finished.done():
            self.finished.set_result(None)

    def _label(self) -> str:
        return f"feed:{self._name}"

    def _note_run(self, event: SurfaceEvent) -> None:
        if isinstance(event, RunStarted):
            self._run_id = event.run_id
            self._posted = False

    def _note_shown(self, event: SurfaceEvent, moved: bool) -> None:
        """Tell the tap when the run's first post (the surface's ref moved, or text, a tool
        or the end was shown) and its end were shown."""
        run_id = self._run_id
        if run_id is None:
            return
        if not self._posted and (moved or isinstance(event, _VISIBLE)):
            self._posted = True
            self._tell(lambda tap: tap.shown(run_id, "first_post"))
        if isinstance(event, RunFinished):
            self._tell(lambda tap: tap.shown(run_id, "answer"))

    def _tell(self, call: Callable[[FeedTap], None]) -> None:
        if self._tap is None:
            return
        try:
            call(self._tap)
        except Exception:
            log.exception("the feed's tap failed")

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

    async def _checkpoint(self) -> None:
        """Store the surface's ref now if it moved (the surface asks, before a run's end)."""
        if self._ref_moved():
            await self._record_ref()

    async def _record_ref(self) -> None:
        self._ref = self._read_ref()
        ref = self._ref
        if self._run_id is None or self._on_ref_change is None:
            return
        try:
            await self._on_ref_change(self._run_id, ref)
        except Exception:
            log.exception("could not record the surface ref of run %s", self._run_id)


async def _guarded(awaitable: Awaitable[None], what: str) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("surface failed to %s", what)
