"""Coalescing and throttling of surface updates.

Owns: `Throttle`, which turns many "something changed" requests into at most one call of an
async `flush` per interval (a platform's rate: Slack's ~1 update/s per message, Discord's
5 per 5 s per channel), and `drain`, which waits until everything requested so far has been
flushed — so the final state (the final answer) is never lost to throttling.

`flush` must render the *current* state each time it is called; it may raise (the error is
logged and the next request tries again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Throttle:
    def __init__(
        self,
        flush: Callable[[], Awaitable[None]],
        interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._flush = flush
        self._interval_s = interval_s
        self._clock = clock
        self._last_flush = float("-inf")
        self._requested = 0  # generation of the latest request
        self._flushed = 0  # generation covered by the latest completed flush
        self._changed = asyncio.Condition()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def request(self) -> None:
        """Ask for a flush; cheap and synchronous. Many requests make one flush."""
        if self._closed:
            return
        self._requested += 1
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._worker(), name="throttle")

    async def drain(self) -> None:
        """Return once a flush that started after the latest request has completed."""
        if self._requested == self._flushed:
            return
        target = self._requested
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._worker(), name="throttle")
        async with self._changed:
            await self._changed.wait_for(lambda: self._flushed >= target or self._closed)

    async def close(self) -> None:
        """Flush what is pending, then stop."""
        await self.drain()
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        async with self._changed:
            self._changed.notify_all()

    async def _worker(self) -> None:
        while self._requested > self._flushed:
            await self._wakeup.wait()
            wait = self._last_flush + self._interval_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._wakeup.clear()
            target = self._requested
            self._last_flush = self._clock()
            try:
                await self._flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Counted as done so drain() cannot hang; the next request renders afresh.
                log.exception("a surface update failed; the next update will retry")
            self._flushed = target
            async with self._changed:
                self._changed.notify_all()
