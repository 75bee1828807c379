"""A platform event delivered twice is handed to the runner once, without doing its slow work
twice: one de-duplication in front of the runner for every platform.

Owns: `DeliveryDedup`, the deliveries this process is handing over now or handed over lately
(bounded: the `limit` most recent). A repeat of one being handed over waits for it and is
dropped if it got through; a repeat of one handed over lately is dropped at once; if the first
failed, the repeat tries again. What it spares: Slack's `app_mention` and `message` for one
mention, a retry, a gateway re-delivery each downloading files, reading the thread, starting
a thread or deferring an interaction a second time.

Must not: be the durable claim. The runner's `accept_delivery` is (across restarts and
instances); this is only an in-process shortcut in front of it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["RECENT_DELIVERIES", "DeliveryDedup"]

RECENT_DELIVERIES = 10_000  # handed-over delivery ids remembered


class DeliveryDedup:
    """`async with dedup.first(delivery_id) as first:` handle it only when `first`."""

    def __init__(self, limit: int = RECENT_DELIVERIES) -> None:
        self._limit = limit
        self._inflight: dict[str, asyncio.Future[bool]] = {}  # delivery id → handed over?
        self._recent: OrderedDict[str, None] = OrderedDict()

    @asynccontextmanager
    async def first(self, delivery_id: str) -> AsyncIterator[bool]:
        """True for the delivery to handle: it counts as handed over when the block ends
        without an exception. False for a repeat (the block should do nothing)."""
        if delivery_id in self._recent:
            yield False
            return
        earlier = self._inflight.get(delivery_id)
        if earlier is not None and await asyncio.shield(earlier):
            yield False
            return
        handed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._inflight[delivery_id] = handed
        try:
            yield True
            handed.set_result(True)
            self._remember(delivery_id)
        finally:
            if not handed.done():
                handed.set_result(False)
            if self._inflight.get(delivery_id) is handed:
                del self._inflight[delivery_id]

    def _remember(self, delivery_id: str) -> None:
        self._recent[delivery_id] = None
        while len(self._recent) > self._limit:
            self._recent.popitem(last=False)
