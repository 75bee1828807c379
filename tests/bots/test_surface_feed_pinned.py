"""What a surface feed promises its caller (the runner), pinned: a fast surface costs no task
and is finished at once; a slow close is waited for; a surface that fails keeps getting later
events and is still closed; a ref is recorded only when it really moved and the run is known
(also when the run started while events were queued); a cancelled feed lets the surface's own
clean-up finish."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.surface.contract import Notice, RunStarted, SurfaceEvent
from bots.surface.feed import SurfaceFeed
from tests.fakes.recording_surface import RecordingSurface

Moved = list[tuple[int, dict[str, Any]]]


def recorder(moved: Moved) -> Any:
    async def on_ref_change(run_id: int, ref: dict[str, Any]) -> None:
        moved.append((run_id, ref))

    return on_ref_change


async def test_a_fast_surface_with_a_steady_ref_is_finished_in_a_turn_and_records_nothing() -> None:
    surface = RecordingSurface("fast")
    moved: Moved = []
    feed = SurfaceFeed(surface, on_ref_change=recorder(moved))
    assert feed.ref == surface.ref  # the ref it starts from is the surface's own
    feed.put(RunStarted("k", 1, None))
    feed.put(Notice("hi"))
    feed.close()
    await asyncio.sleep(0)
    assert feed.finished.done()  # one loop turn: the feed's task shows it all and closes
    assert surface.closed == 1 and surface.types() == ["run_started", "notice"]
    await feed.wait()
    assert moved == []


class SlowClose(RecordingSurface):
    def __init__(self) -> None:
        super().__init__("slow-close")
        self.may_close = asyncio.Event()

    async def close(self) -> None:
        await self.may_close.wait()
        await super().close()


async def test_a_slow_close_is_waited_for_before_the_feed_is_finished() -> None:
    surface = SlowClose()
    feed = SurfaceFeed(surface)
    feed.put(Notice("hi"))
    feed.close()
    await asyncio.sleep(0)
    assert not feed.finished.done() and surface.closed == 0
    surface.may_close.set()
    await asyncio.wait_for(feed.wait(), 5)
    assert surface.closed == 1


class Flaky(RecordingSurface):
    """Fails on `boom` notices, and is slow (one network wait) on every event."""

    def __init__(self) -> None:
        super().__init__("flaky")
        self.where: dict[str, Any] = {"at": None}

    @property
    def ref(self) -> dict[str, Any]:
        return dict(self.where)

    async def emit(self, event: SurfaceEvent) -> None:
        await asyncio.sleep(0)
        if isinstance(event, Notice) and event.text == "boom":
            raise RuntimeError("platform error")
        if isinstance(event, RunStarted):
            self.where["at"] = f"posted {event.run_id}"
        await super().emit(event)


async def test_a_failing_slow_surface_gets_later_events_and_a_run_started_in_the_queue() -> None:
    surface = Flaky()
    moved: Moved = []
    feed = SurfaceFeed(surface, on_ref_change=recorder(moved))
    feed.put(Notice("boom"))  # shown by the feed's task: the rest queue behind it
    feed.put(RunStarted("k", 5, None))
    feed.put(Notice("boom"))
    feed.put(Notice("after"))
    feed.close()
    await asyncio.wait_for(feed.wait(), 5)
    assert surface.types() == ["run_started", "notice"]
    assert surface.closed == 1
    assert moved == [(5, {"at": "posted 5"})]  # learnt from the queued run_started
    assert feed.ref == {"at": "posted 5"}


async def test_a_ref_that_moves_before_the_run_is_known_is_not_recorded() -> None:
    surface = Flaky()
    moved: Moved = []
    feed = SurfaceFeed(surface, on_ref_change=recorder(moved))
    surface.where["at"] = "elsewhere"
    feed.put(Notice("hi"))
    feed.close()
    await asyncio.wait_for(feed.wait(), 5)
    assert moved == [] and surface.closed == 1
    assert feed.ref == {"at": "elsewhere"}  # still followed, for the next change


async def test_a_surface_whose_ref_cannot_be_read_is_shown_everything_and_nothing_recorded() -> (
    None
):
    class NoRef(RecordingSurface):
        @property
        def ref(self) -> dict[str, Any]:
            raise RuntimeError("no ref yet")

    surface = NoRef()
    moved: Moved = []
    feed = SurfaceFeed(surface, on_ref_change=recorder(moved), run_id=9)
    assert feed.ref == {}
    feed.put(Notice("one"))
    feed.put(Notice("two"))
    feed.close()
    await asyncio.sleep(0)
    assert feed.finished.done()  # an unreadable ref is not a move: nothing to record
    assert [n.text for n in surface.notices()] == ["one", "two"] and surface.closed == 1
    assert moved == []


async def test_a_cancelled_feed_lets_the_surface_finish_its_clean_up() -> None:
    class TidyOnCancel(RecordingSurface):
        def __init__(self) -> None:
            super().__init__("tidy")
            self.tidied = False

        async def emit(self, event: SurfaceEvent) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # e.g. a last edit of the message
                self.tidied = True
                raise

    surface = TidyOnCancel()
    feed = SurfaceFeed(surface)
    feed.put(Notice("forever"))
    feed.put(Notice("queued"))
    task = next(t for t in asyncio.all_tasks() if t.get_name().startswith("feed:"))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait([task], timeout=5)
    assert surface.tidied
    assert task.cancelled() and feed.finished.cancelled()
    assert surface.events == []  # the queued event was not shown after the cancel
