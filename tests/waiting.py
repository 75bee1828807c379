"""Waiting in tests for something another task, thread or process makes true: a hang guard
with a generous bound (machines here are shared and loaded), never a speed check."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

GUARD_S = 30.0


async def eventually(
    what: str,
    condition: Callable[[], bool | Awaitable[bool]],
    timeout_s: float = GUARD_S,
    every_s: float = 0.02,
) -> None:
    """Return once `condition()` (a function or a coroutine function) is true; fail saying
    `what` was never seen within `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        await asyncio.sleep(every_s)
