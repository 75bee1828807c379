"""Keeping Discord's per-channel limit on message writes ourselves.

Owns: `ChannelPacer`, which lets at most `WRITES_PER_WINDOW` sends and edits through per
`WINDOW_S` per channel, in the order they asked. Discord allows about 5 per 5 s per channel,
shared by sends and edits (../shared/PLATFORMS.md); its headers describe each route's bucket
alone, so discord.py, pacing by them, sends a streamed answer's posts and edits past the shared
limit and is answered 429. A write's slot is counted from when Discord answered it, so delays
on the way cannot bunch writes together at Discord's end.

Must not: know what is written (the surface decides); pace interaction-token (webhook) calls,
which Discord limits apart from the channel.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["MARGIN_S", "WINDOW_S", "WRITES_PER_WINDOW", "ChannelPacer"]

WRITES_PER_WINDOW = 5
WINDOW_S = 5.0
MARGIN_S = 0.1  # Discord's clock and ours differ a little at the window's edge
_IDLE_LANES_KEPT = 1_000  # channels remembered before idle ones are forgotten


@dataclass(slots=True)
class _Lane:
    """One channel: when its recent writes were answered, and those still on their way."""

    answered: collections.deque[float] = field(default_factory=collections.deque)
    in_flight: int = 0
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # writers in the order they asked
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class ChannelPacer:
    """One per bot (one token): every surface writing in a channel shares its lane."""

    def __init__(
        self,
        writes: int = WRITES_PER_WINDOW,
        window_s: float = WINDOW_S + MARGIN_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._writes = writes
        self._window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._lanes: dict[int, _Lane] = {}

    @asynccontextmanager
    async def write(self, channel_id: int | None) -> AsyncIterator[None]:
        """Around one send or edit in `channel_id` (None: not a channel we pace)."""
        if channel_id is None:
            yield
            return
        lane = self._lane(channel_id)
        async with lane.turn:
            await self._wait_for_a_slot(lane)
            lane.in_flight += 1
        try:
            yield
        finally:
            lane.in_flight -= 1
            lane.answered.append(self._clock())
            lane.changed.set()

    async def _wait_for_a_slot(self, lane: _Lane) -> None:
        while True:
            now = self._clock()
            while lane.answered and lane.answered[0] + self._window_s <= now:
                lane.answered.popleft()
            if len(lane.answered) + lane.in_flight < self._writes:
                return
            if lane.answered:
                await self._sleep(lane.answered[0] + self._window_s - now)
            else:  # every slot is a write still on its way: wait for one to be answered
                lane.changed.clear()
                await lane.changed.wait()

    def _lane(self, channel_id: int) -> _Lane:
        lane = self._lanes.get(channel_id)
        if lane is None:
            if len(self._lanes) >= _IDLE_LANES_KEPT:
                self._forget_idle()
            lane = self._lanes[channel_id] = _Lane()
        return lane

    def _forget_idle(self) -> None:
        now = self._clock()
        for channel_id, lane in list(self._lanes.items()):
            recent = lane.answered and lane.answered[-1] + self._window_s > now
            if not recent and not lane.in_flight and not lane.turn.locked():
                del self._lanes[channel_id]
