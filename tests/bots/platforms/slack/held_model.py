"""A scripted model whose replies wait at points the test chooses (before a reply starts,
after some of its text, before it ends), so a test shows a run at a moment without sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from core.models.base import ModelRequest, StreamEnd, StreamEvent, StreamStart, TextDelta
from core.models.scripted import ScriptedModel, ScriptEntry


class HeldModel(ScriptedModel):
    """`ScriptedModel` with gates: each `hold_*` returns an event the reply numbered `reply`
    (0 for the run's first model call) waits for at that point."""

    def __init__(self, script: Iterable[ScriptEntry]) -> None:
        super().__init__(script)
        self._replies = 0
        self._before: dict[int, asyncio.Event] = {}
        self._after_text: dict[int, tuple[int, asyncio.Event]] = {}
        self._before_end: dict[int, asyncio.Event] = {}

    def hold_before(self, reply: int) -> asyncio.Event:
        return self._before.setdefault(reply, asyncio.Event())

    def hold_after_text(self, reply: int, chars: int) -> asyncio.Event:
        gate = asyncio.Event()
        self._after_text[reply] = (chars, gate)
        return gate

    def hold_before_end(self, reply: int) -> asyncio.Event:
        return self._before_end.setdefault(reply, asyncio.Event())

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        number = self._replies
        self._replies += 1
        written = 0
        held_text = False
        async for event in super().stream(request):
            if isinstance(event, StreamStart) and number in self._before:
                await self._before[number].wait()
            if isinstance(event, StreamEnd) and number in self._before_end:
                await self._before_end[number].wait()
            yield event
            if isinstance(event, TextDelta) and number in self._after_text and not held_text:
                written += len(event.delta)
                chars, gate = self._after_text[number]
                if written >= chars:
                    held_text = True
                    await gate.wait()
