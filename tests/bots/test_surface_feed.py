"""A surface's own queue: order kept, text deltas bounded, ref changes reported, failures
contained."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.surface import Notice, RunStarted, SurfaceEvent
from bots.surface_feed import SurfaceFeed
from core.events import MessageEnd, MessageUpdate
from core.messages import AssistantMessage, Text
from core.models.base import TextDelta
from tests.fakes.recording_surface import RecordingSurface


class Gated(RecordingSurface):
    def __init__(self) -> None:
        super().__init__("gated")
        self.open = asyncio.Event()
        self.where: dict[str, Any] = {"at": None}

    @property
    def ref(self) -> dict[str, Any]:
        return dict(self.where)

    async def emit(self, event: SurfaceEvent) -> None:
        await self.open.wait()
        if isinstance(event, RunStarted):
            self.where["at"] = "posted"
        if isinstance(event, Notice) and event.text == "boom":
            raise RuntimeError("platform error")
        await super().emit(event)


async def test_a_full_queue_drops_only_text_deltas_and_keeps_order() -> None:
    surface = Gated()
    moved: list[tuple[int, dict[str, Any]]] = []

    async def on_ref_change(run_id: int, ref: dict[str, Any]) -> None:
        moved.append((run_id, ref))

    feed = SurfaceFeed(surface, on_ref_change=on_ref_change, limit=3)
    reply = AssistantMessage(content=[Text(text="hello")])
    feed.put(RunStarted("k", 7, None))
    for _ in range(10):
        feed.put(MessageUpdate(message=reply, delta=TextDelta(partial=reply, index=0, delta="x")))
    feed.put(Notice("boom"))
    feed.put(MessageEnd(message=reply))
    feed.close()
    feed.put(Notice("after close"))  # ignored
    surface.open.set()
    await asyncio.wait_for(feed.wait(), 5)

    assert surface.types() == ["run_started", "message_update", "message_update", "message_end"]
    assert feed.dropped_deltas == 8
    assert surface.closed == 1
    assert moved == [(7, {"at": "posted"})]
