"""`ChannelPacer`: at most five writes per window per channel, counted from their answers, in
the order asked; other channels are not held up. A fake clock, whose sleeps advance it."""

from __future__ import annotations

import asyncio

from bots.platforms.discord.pacing import ChannelPacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def write(pacer: ChannelPacer, clock: Clock, channel: int, took: float = 0.0) -> float:
    """One write that Discord answers after `took`; when it was let through."""
    async with pacer.write(channel):
        started = clock.now
        clock.now += took
    return started


async def test_the_sixth_write_in_a_window_waits_for_the_first_to_age_out() -> None:
    clock = Clock()
    pacer = ChannelPacer(5, 5.0, clock=clock, sleep=clock.sleep)
    starts = [await write(pacer, clock, 1, took=0.2) for _ in range(6)]
    assert [round(start, 6) for start in starts[:5]] == [100.0, 100.2, 100.4, 100.6, 100.8]
    # Counted from the first write's answer (100.2), not from when it was sent.
    assert abs(starts[5] - 105.2) < 1e-9
    assert await write(pacer, clock, 2) == clock.now  # another channel: at once


async def test_writers_in_one_channel_go_in_the_order_they_asked() -> None:
    clock = Clock()
    pacer = ChannelPacer(2, 1.0, clock=clock, sleep=clock.sleep)
    order: list[int] = []

    async def writer(number: int) -> None:
        async with pacer.write(7):
            order.append(number)

    await asyncio.gather(*(writer(number) for number in range(6)))
    assert order == list(range(6))
    assert sum(clock.slept) >= 2.0  # six writes, two per second: two waits of a window


async def test_writes_in_flight_hold_their_slots_until_answered() -> None:
    clock = Clock()
    pacer = ChannelPacer(1, 1.0, clock=clock, sleep=clock.sleep)
    answered = asyncio.Event()
    second_started = asyncio.Event()

    async def slow() -> None:
        async with pacer.write(3):
            await answered.wait()

    async def next_one() -> None:
        async with pacer.write(3):
            second_started.set()

    first = asyncio.create_task(slow())
    await asyncio.sleep(0)
    second = asyncio.create_task(next_one())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second_started.is_set()
    answered.set()
    await asyncio.gather(first, second)
    assert second_started.is_set() and clock.slept  # waited a window after the answer


async def test_no_channel_is_not_paced() -> None:
    clock = Clock()
    pacer = ChannelPacer(1, 60.0, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        await write(pacer, clock, None)  # type: ignore[arg-type]
    assert clock.slept == []
