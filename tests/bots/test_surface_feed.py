"""A surface's own queue: order kept, text deltas bounded, ref changes reported, failures
contained."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.surface.contract import Notice, RunStarted, SurfaceEvent
from bots.surface.feed import SurfaceFeed
from core.events import (
    MessageEnd,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
)
from core.messages import AssistantMessage, Text, ToolResultMessage
from core.models.base import TextDelta
from core.tools import ToolResult
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


class SometimesSlow(RecordingSurface):
    """Shows some events at once and waits (a network call) on others."""

    def __init__(self) -> None:
        super().__init__("sometimes")
        self.where: dict[str, Any] = {"at": None}

    @property
    def ref(self) -> dict[str, Any]:
        return dict(self.where)

    async def emit(self, event: SurfaceEvent) -> None:
        if isinstance(event, Notice) and event.text.endswith("slow"):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        if isinstance(event, RunStarted):
            self.where["at"] = f"posted {event.run_id}"
        await super().emit(event)


async def test_order_is_kept_when_a_surface_is_fast_for_some_events_and_slow_for_others() -> None:
    surface = SometimesSlow()
    feed = SurfaceFeed(surface)
    texts = [f"{i} {'slow' if i % 3 == 0 else 'fast'}" for i in range(30)]
    for i, text in enumerate(texts):
        feed.put(Notice(text))
        if i % 4 == 0:
            await asyncio.sleep(0)  # sometimes the feed catches up, sometimes not
    feed.close()
    await asyncio.wait_for(feed.wait(), 5)

    assert [n.text for n in surface.notices()] == texts
    assert surface.closed == 1


async def test_a_fast_surface_is_shown_at_the_next_turn_and_a_slow_one_never_blocks_put() -> None:
    fast = RecordingSurface("fast")
    feed = SurfaceFeed(fast)
    feed.put(Notice("now"))
    assert fast.notices() == []  # never in the caller's task (issue 24, R1)
    await asyncio.sleep(0)
    assert [n.text for n in fast.notices()] == ["now"]  # one loop turn later

    gated = Gated()
    slow = SurfaceFeed(gated)
    slow.put(Notice("one"))
    slow.put(Notice("two"))  # returns although the surface is still busy with "one"
    slow.close()
    assert gated.events == [] and not slow.finished.done()
    gated.open.set()
    await asyncio.wait_for(slow.wait(), 5)
    assert [n.text for n in gated.notices()] == ["one", "two"]
    assert gated.closed == 1


async def test_a_ref_moved_by_a_fast_surface_is_recorded_and_failures_are_contained() -> None:
    class Failing(SometimesSlow):
        async def emit(self, event: SurfaceEvent) -> None:
            if isinstance(event, Notice) and event.text == "boom":
                raise RuntimeError("platform error")
            await super().emit(event)

    surface = Failing()
    moved: list[tuple[int, dict[str, Any]]] = []

    async def on_ref_change(run_id: int, ref: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # a store call
        moved.append((run_id, ref))

    feed = SurfaceFeed(surface, on_ref_change=on_ref_change)
    feed.put(Notice("boom"))  # raises inside the surface, not here
    feed.put(RunStarted("k", 3, None))
    feed.put(Notice("after"))
    feed.close()
    await asyncio.wait_for(feed.wait(), 5)

    assert surface.types() == ["run_started", "notice"]
    assert moved == [(3, {"at": "posted 3"})]
    assert surface.closed == 1


async def test_a_cancelled_feed_cancels_the_surface_call_it_was_waiting_on() -> None:
    class Stuck(RecordingSurface):
        def __init__(self) -> None:
            super().__init__("stuck")
            self.cancelled = False

        async def emit(self, event: SurfaceEvent) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    surface = Stuck()
    feed = SurfaceFeed(surface)
    feed.put(Notice("forever"))
    task = next(t for t in asyncio.all_tasks() if t.get_name().startswith("feed:"))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait([task], timeout=5)
    assert surface.cancelled
    assert feed.finished.cancelled()


async def test_a_chatty_tool_behind_a_slow_surface_keeps_one_update_per_call_waiting() -> None:
    # Partial results are snapshots: behind a stalled surface only the newest of each call
    # waits, so a command printing for an hour cannot grow the queue without bound.
    surface = Gated()
    feed = SurfaceFeed(surface, limit=50)
    feed.put(RunStarted("k", 7, None))
    feed.put(ToolExecutionStart(tool_call_id="a", tool_name="bash", arguments={}))
    feed.put(ToolExecutionStart(tool_call_id="b", tool_name="bash", arguments={}))
    for line in range(20_000):
        call = "a" if line % 2 else "b"
        feed.put(ToolExecutionUpdate(call, "bash", ToolResult.text(f"line {line}")))
    assert feed.waiting <= 5  # run_started (showing), two starts, one update per call
    result = ToolResultMessage(tool_call_id="a", tool_name="bash", content=[Text(text="done")])
    feed.put(ToolExecutionEnd(tool_call_id="a", tool_name="bash", result=result, duration_s=1))
    feed.close()
    surface.open.set()
    await asyncio.wait_for(feed.wait(), 5)

    updates = [e for e in surface.events if isinstance(e, ToolExecutionUpdate)]
    shown = [(u.tool_call_id, u.partial.content[0]) for u in updates]
    assert [(call, getattr(part, "text", None)) for call, part in shown] == [
        ("b", "line 19998"),
        ("a", "line 19999"),
    ]
    assert surface.types()[-1] == "tool_execution_end"
    assert feed.coalesced_updates == 20_000 - 2
