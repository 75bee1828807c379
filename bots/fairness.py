"""Fair shares of the runs in progress: one noisy channel or person cannot starve the others.

Owns: `RunSlots`, which lets at most `total` runs work at once, at most `per_channel` of them
in one channel and `per_user` for one person (if set). A run that finds no free slot waits; a
freed slot goes to the channels in turn (round robin), and inside a channel to the oldest
waiter whose person is under their share. So a channel flooded with a thousand threads gets
`per_channel` runs at a time and every other channel still gets its own. Messages arriving
meanwhile wait in their conversation's inbox (they are stored: nothing is lost) and are
answered together.

Nothing here awaits anything but its own waiters; the runner (`bots.runner`) is the only user.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class _Waiter:
    channel: str
    user: str | None
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class RunSlots:
    """`async with slots.slot(channel_key, user_id):` around each run."""

    def __init__(self, *, total: int, per_channel: int, per_user: int | None) -> None:
        self.total = total
        self.per_channel = per_channel
        self.per_user = per_user
        self.active = 0
        self._by_channel: dict[str, int] = {}
        self._by_user: dict[str, int] = {}
        # Channels with waiters, in the order they get their next turn.
        self._waiting: OrderedDict[str, deque[_Waiter]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    def running_in(self, channel_key: str) -> int:
        return self._by_channel.get(channel_key, 0)

    @asynccontextmanager
    async def slot(self, channel_key: str, user_id: str | None) -> AsyncIterator[None]:
        waiter = _Waiter(channel_key, user_id)
        self._waiting.setdefault(channel_key, deque()).append(waiter)
        self._grant()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(waiter)  # granted just as it was cancelled: give it back
            else:
                self._forget(waiter)
            raise
        try:
            yield
        finally:
            self._release(waiter)

    def _fits(self, waiter: _Waiter) -> bool:
        if self._by_channel.get(waiter.channel, 0) >= self.per_channel:
            return False
        if waiter.user is None or self.per_user is None:
            return True
        return self._by_user.get(waiter.user, 0) < self.per_user

    def _grant(self) -> None:
        """Hand free slots out, one per channel per round, until none fits."""
        granted = True
        while granted and self.active < self.total and self._waiting:
            granted = False
            for channel in list(self._waiting):
                if self.active >= self.total:
                    break
                queue = self._waiting[channel]
                chosen = next((w for w in queue if self._fits(w)), None)
                if chosen is None:
                    continue
                queue.remove(chosen)
                if not queue:
                    del self._waiting[channel]
                else:
                    self._waiting.move_to_end(channel)  # its next turn comes after the others
                self._take(chosen)
                chosen.granted.set_result(None)
                granted = True

    def _take(self, waiter: _Waiter) -> None:
        self.active += 1
        self._by_channel[waiter.channel] = self._by_channel.get(waiter.channel, 0) + 1
        if waiter.user is not None:
            self._by_user[waiter.user] = self._by_user.get(waiter.user, 0) + 1

    def _release(self, waiter: _Waiter) -> None:
        self.active -= 1
        _decrement(self._by_channel, waiter.channel)
        if waiter.user is not None:
            _decrement(self._by_user, waiter.user)
        self._grant()

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._waiting.get(waiter.channel)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[waiter.channel]


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
