"""One queue per surface, so saving messages never waits on a platform.

Owns: `SurfaceFeed`. The runner puts events (never awaits a surface). An event is shown at once,
in the caller's step, when nothing is waiting before it; the moment a surface awaits (a network
call, a rate limit) or events queue up, the feed's own task takes over and shows the rest in
order, then closes the surface. So a fast surface (a terminal, a test) costs no task at all,
and a slow one never delays the runner. After each event the feed compares `surface.ref` with
the last stored one and records a change with the run (`set_run_surface_ref`), so a restart
can edit the message a run posted.

Bounded: once `limit` events wait (the one being shown counts), further text deltas
(`message_update`) are dropped and counted; a surface still gets every other event, and
`message_update.message` / `message_end` always carry the whole reply so far. The other events
are few per run (bounded by the turn cap and the tools per turn).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from bots.surface import Checkpointed, RunStarted, Surface, SurfaceEvent
from core.events import MessageUpdate

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1_000

RefChanged = Callable[[int, dict[str, Any]], Awaitable[object]]


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
    ) -> None:
        self.surface = surface
        self.dropped_deltas = 0
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._on_ref_change = on_ref_change
        self._limit = limit
        self._name = name
        self._queue: deque[SurfaceEvent] = deque()
        self._task: asyncio.Task[None] | None = None  # only while the surface is slow
        self._closing = False
        self._run_id = run_id  # else learnt from the run_started it shows
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
        if self._task is not None:  # the surface is busy: wait behind what it is showing
            if isinstance(event, MessageUpdate) and len(self._queue) + 1 >= self._limit:
                self.dropped_deltas += 1
                return
            self._queue.append(event)
            return
        self._note_run(event)
        pending = _start(self.surface.emit(event), f"show {event.type}")
        if pending is not None or self._ref_moved():
            self._task = asyncio.create_task(self._pump(pending, event.type), name=self._label())

    def close(self) -> None:
        """Show what is queued, then close the surface (idempotent)."""
        if self._closing:
            return
        self._closing = True
        if self._task is not None:  # it closes the surface once the queue is shown
            return
        pending = _start(self.surface.close(), "close")
        if pending is not None or self._ref_moved():
            self._task = asyncio.create_task(self._pump(pending, None), name=self._label())
        else:
            self._finish()

    async def wait(self) -> None:
        await asyncio.shield(self.finished)

    async def _pump(self, pending: Awaitable[None] | None, showing: str | None) -> None:
        """Finish what the caller's step started (`showing` an event, or None: closing), then
        show the queue in order and close the surface if asked."""
        try:
            if pending is not None:
                await _guarded(pending, f"show {showing}" if showing else "close")
            if self._ref_moved():
                await self._record_ref()
            if showing is not None:
                while self._queue:
                    event = self._queue.popleft()
                    self._note_run(event)
                    await _guarded(self.surface.emit(event), f"show {event.type}")
                    if self._ref_moved():
                        await self._record_ref()
                if not self._closing:
                    return
                await _guarded(self.surface.close(), "close")
                if self._ref_moved():
                    await self._record_ref()
            self._finish()
        except asyncio.CancelledError:
            self.finished.cancel()
            raise
        finally:
            self._task = None  # no await after the queue was found empty: `put` shows inline

    def _finish(self) -> None:
        if self.dropped_deltas:
            log.info("a slow surface skipped %s text deltas", self.dropped_deltas)
        if not self.finished.done():
            self.finished.set_result(None)

    def _label(self) -> str:
        return f"feed:{self._name}"

    def _note_run(self, event: SurfaceEvent) -> None:
        if isinstance(event, RunStarted):
            self._run_id = event.run_id

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


def _start(awaitable: Awaitable[None], what: str) -> Awaitable[None] | None:
    """Run a surface call up to its first real wait, in the caller's step. None if it is
    already over (a failure is logged: a surface never breaks the runner); else what is left
    of it, for the feed's task to await."""
    if not isinstance(awaitable, Coroutine):
        return awaitable
    try:
        waiting_on = awaitable.send(None)
    except StopIteration:
        return None
    except Exception:
        log.exception("surface failed to %s", what)
        return None
    return _Resumed(awaitable, waiting_on)


async def _guarded(awaitable: Awaitable[None], what: str) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("surface failed to %s", what)


class _Resumed:
    """The rest of a coroutine that was started in another step and is waiting on
    `waiting_on`: awaiting this hands that wait to the awaiting task, then resumes the
    coroutine (results, exceptions and cancellation pass through unchanged)."""

    __slots__ = ("_coroutine", "_waiting_on")

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        self._coroutine = coroutine
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, None]:
        waiting_on = self._waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                self._coroutine.close()
                raise
            except BaseException as exc:
                try:
                    waiting_on = self._coroutine.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                waiting_on = self._coroutine.send(sent)
            except StopIteration:
                return
