"""A channel's stored configuration: replaced wholesale, per channel, across restarts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from storage.base import ConversationStore
from storage.sqlite import SqliteStore
from tests.storage.conftest import FakeClock


async def test_a_channel_without_stored_configuration_has_none(store: ConversationStore) -> None:
    assert await store.get_channel_config("slack:T:C1") is None


async def test_stored_configuration_survives_a_restart_and_is_per_channel(
    db_path: Path, clock: FakeClock
) -> None:
    config = {"system_prompt": "Be brief. ✓", "model": "claude-x", "tools": ["read", "ls"]}
    async with SqliteStore.open(db_path, clock=clock) as store:
        await store.set_channel_config("slack:T:C1", config, by="U1")
        await store.set_channel_config("slack:T:C2", {"model": "other"}, by="U2")

    async with SqliteStore.open(db_path, clock=clock) as restarted:
        assert await restarted.get_channel_config("slack:T:C1") == config
        assert await restarted.get_channel_config("slack:T:C2") == {"model": "other"}
        assert await restarted.get_channel_config("slack:T:C3") is None

    with sqlite3.connect(db_path) as db:
        who = db.execute(
            "SELECT updated_by, updated_at FROM channel_config WHERE channel_key = ?",
            ("slack:T:C1",),
        ).fetchone()
    assert who == ("U1", clock.now)


async def test_setting_replaces_the_whole_configuration(
    store: ConversationStore, clock: FakeClock
) -> None:
    await store.set_channel_config("c", {"model": "a", "tools": ["read"]}, by="U1")
    clock.advance(5)
    await store.set_channel_config("c", {"model": "b"}, by=None)
    assert await store.get_channel_config("c") == {"model": "b"}
    await store.set_channel_config("c", {}, by="U1")
    assert await store.get_channel_config("c") == {}


async def test_a_value_json_cannot_hold_is_refused_and_nothing_changes(
    store: ConversationStore,
) -> None:
    await store.set_channel_config("c", {"model": "a"}, by="U1")
    with pytest.raises(TypeError):
        await store.set_channel_config("c", {"model": object()}, by="U1")
    assert await store.get_channel_config("c") == {"model": "a"}


async def test_a_channels_conversations_newest_first_and_bounded(store: ConversationStore) -> None:
    for thread in ("1.0", "2.0", "3.0"):
        await store.get_or_create_conversation(f"slack:T:C1:{thread}", channel_key="slack:T:C1")
    await store.get_or_create_conversation("slack:T:C2:1.0", channel_key="slack:T:C2")

    found = await store.channel_conversations("slack:T:C1", limit=2)
    assert [c.key for c in found] == ["slack:T:C1:3.0", "slack:T:C1:2.0"]
    assert await store.channel_conversations("slack:T:C9", limit=10) == []
