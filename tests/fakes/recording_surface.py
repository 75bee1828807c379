"""A Surface that records everything it is shown, for tests of the runner."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.surface.contract import Notice, RunFinished, SurfaceEvent
from core.events import ToolExecutionStart


class RecordingSurface:
    def __init__(self, name: str = "test") -> None:
        self.name = name
        self.events: list[SurfaceEvent] = []
        self.closed = 0
        self._changed = asyncio.Condition()

    @property
    def ref(self) -> dict[str, Any]:
        return {"surface": "recording", "name": self.name}

    async def emit(self, event: SurfaceEvent) -> None:
        self.events.append(event)
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        self.closed += 1

    async def wait_for(self, predicate: Any, limit_s: float = 5.0) -> None:
        """Wait until `predicate(self)` holds (a condition, never a sleep)."""

        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self))

        await asyncio.wait_for(_wait(), limit_s)

    # what tests ask about
    def types(self) -> list[str]:
        return [event.type for event in self.events]

    def finished(self) -> list[RunFinished]:
        return [e for e in self.events if isinstance(e, RunFinished)]

    def notices(self) -> list[Notice]:
        return [e for e in self.events if isinstance(e, Notice)]

    def tool_starts(self) -> list[ToolExecutionStart]:
        return [e for e in self.events if isinstance(e, ToolExecutionStart)]


class RecordingSurfaces:
    """A SurfaceFactory handing out recording surfaces for earlier runs' refs."""

    def __init__(self) -> None:
        self.made: list[tuple[str, dict[str, Any], RecordingSurface]] = []

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> RecordingSurface:
        surface = RecordingSurface(str(ref.get("name", "restored")))
        self.made.append((conversation_key, ref, surface))
        return surface


class HoldingTheEnd(RecordingSurfaces):
    """Surfaces on which a run's end (`run_finished`) waits until `lift` is set: a restarted
    process that dies (never lifted) or is slow while showing a recovered run's end."""

    def __init__(self) -> None:
        super().__init__()
        self.reached_the_end = asyncio.Event()
        self.lift = asyncio.Event()

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> RecordingSurface:
        surface = _HoldsTheEnd(str(ref.get("name", "restored")), self)
        self.made.append((conversation_key, ref, surface))
        return surface


class _HoldsTheEnd(RecordingSurface):
    def __init__(self, name: str, holding: HoldingTheEnd) -> None:
        super().__init__(name)
        self._holding = holding

    async def emit(self, event: SurfaceEvent) -> None:
        if event.type == "run_finished":
            self._holding.reached_the_end.set()
            await self._holding.lift.wait()
        await super().emit(event)
