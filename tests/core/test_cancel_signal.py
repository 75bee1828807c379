"""`CancelSignal`: the flag a run shares with its tools, awaited or observed by callback."""

from __future__ import annotations

import asyncio

from core.tools import CancelSignal


async def test_waiters_wake_and_the_first_reason_is_kept() -> None:
    signal = CancelSignal()
    waiter = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done() and not signal.cancelled
    signal.cancel("Stopped by a person.")
    signal.cancel("a later reason")
    await asyncio.wait_for(waiter, 1.0)
    assert signal.cancelled and signal.reason == "Stopped by a person."


async def test_a_callback_runs_once_when_the_signal_is_set() -> None:
    signal = CancelSignal()
    calls: list[str] = []
    signal.on_cancel(lambda: calls.append(f"first: {signal.reason}"))
    signal.on_cancel(lambda: calls.append("second"))
    assert calls == []
    signal.cancel("stop")
    signal.cancel("again")
    assert calls == ["first: stop", "second"]


async def test_a_removed_callback_is_not_called() -> None:
    signal = CancelSignal()
    calls: list[str] = []
    forget = signal.on_cancel(lambda: calls.append("removed"))
    signal.on_cancel(lambda: calls.append("kept"))
    forget()
    forget()  # twice is harmless
    signal.cancel()
    assert calls == ["kept"]


async def test_a_callback_added_after_the_signal_is_set_runs_at_once() -> None:
    signal = CancelSignal()
    signal.cancel("already")
    calls: list[str] = []
    forget = signal.on_cancel(lambda: calls.append(signal.reason or ""))
    assert calls == ["already"]
    forget()


async def test_registering_and_removing_leaves_nothing_behind() -> None:
    # A long run makes many tool calls on one signal: each call's callback must go.
    signal = CancelSignal()
    for _ in range(1000):
        signal.on_cancel(lambda: None)()
    assert signal._callbacks == []
