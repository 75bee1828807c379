"""The shared de-duplication in front of the runner and the memory of Teammate's threads:
a delivery arriving twice does its work once; a failed first try lets the repeat through;
both memories stay bounded."""

from __future__ import annotations

import asyncio

import pytest

from bots.delivery_dedup import DeliveryDedup
from bots.known_threads import KnownConversations


async def test_a_repeat_while_the_first_is_handed_over_waits_and_is_dropped() -> None:
    dedup = DeliveryDedup()
    release = asyncio.Event()
    handled: list[str] = []

    async def deliver(name: str) -> None:
        async with dedup.first("discord:msg:1") as first:
            if first:
                await release.wait()
                handled.append(name)

    one = asyncio.create_task(deliver("first"))
    await asyncio.sleep(0)
    two = asyncio.create_task(deliver("repeat"))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(one, two)
    async with dedup.first("discord:msg:1") as later:
        assert not later  # handed over lately: dropped at once
    assert handled == ["first"]


async def test_a_repeat_of_a_failed_delivery_tries_again() -> None:
    dedup = DeliveryDedup()
    with pytest.raises(RuntimeError):
        async with dedup.first("slack:C1:1.0") as first:
            assert first
            raise RuntimeError("the download failed")
    async with dedup.first("slack:C1:1.0") as again:
        assert again


async def test_the_deliveries_remembered_are_bounded() -> None:
    dedup = DeliveryDedup(limit=2)
    for delivery in ("a", "b", "c"):
        async with dedup.first(delivery):
            pass
    async with dedup.first("a") as forgotten:
        assert forgotten
    async with dedup.first("c") as remembered:
        assert not remembered


async def test_known_conversations_ask_the_store_once_and_stay_bounded() -> None:
    asked: list[str] = []

    async def store_knows(key: str) -> bool:
        asked.append(key)
        return key.startswith("ours")

    known = KnownConversations(store_knows, remember_unknown=True, limit=2)
    assert await known.ask("ours:1") and await known.ask("ours:1")
    assert not await known.ask("other:1") and not await known.ask("other:1")
    assert asked == ["ours:1", "other:1"]
    known.remember("other:1")  # Teammate started a conversation there since
    assert "other:1" in known and await known.ask("other:1")
    known.remember("ours:2")
    known.remember("ours:3")
    assert "ours:1" not in known  # the least recently used went first


async def test_without_remember_unknown_the_store_is_asked_again() -> None:
    asked: list[str] = []

    async def store_knows(key: str) -> bool:
        asked.append(key)
        return False

    known = KnownConversations(store_knows)
    assert not await known.ask("k") and not await known.ask("k")
    assert asked == ["k", "k"]  # another instance may start it meanwhile
