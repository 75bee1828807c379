"""Conversations and their messages come back exactly as they were stored, in order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.messages import (
    AssistantMessage,
    Author,
    UserMessage,
)
from storage.base import ConversationStore
from storage.sqlite import SqliteStore
from tests.fakes.sample_messages import every_kind_of_message
from tests.storage.conftest import Backend, FakeClock


async def test_every_kind_of_message_round_trips_through_the_store(
    store: ConversationStore, backend: Backend
) -> None:
    conversation = await store.get_or_create_conversation("terminal:rt", channel_key="terminal")
    messages = every_kind_of_message()
    for message in messages:
        await store.append_message(conversation.id, message)
    await store.close()

    async with backend.open() as reopened:
        loaded = await reopened.load(conversation.id)
    assert [stored.message for stored in loaded.messages] == messages
    assert [type(stored.message) for stored in loaded.messages] == [type(m) for m in messages]


async def test_messages_get_gap_free_seqs_in_append_order(store: ConversationStore) -> None:
    conversation = await store.get_or_create_conversation("terminal:seq", channel_key="t")
    other = await store.get_or_create_conversation("terminal:other", channel_key="t")
    seqs = []
    for i in range(25):
        stored = await store.append_message(conversation.id, UserMessage(content=f"m{i}"))
        seqs.append(stored.seq)
        await store.append_message(other.id, UserMessage(content=f"other {i}"))
    assert seqs == list(range(1, 26))

    loaded = await store.load(conversation.id)
    assert [s.seq for s in loaded.messages] == list(range(1, 26))
    assert [s.message.text() for s in loaded.messages] == [f"m{i}" for i in range(25)]
    assert loaded.last_seq == 25
    assert await store.message_count(conversation.id) == 25
    after = await store.messages_after(conversation.id, 20)
    assert [s.seq for s in after] == [21, 22, 23, 24, 25]
    assert await store.messages_after(conversation.id, 25) == []


async def test_user_messages_keep_author_and_platform_id_in_queryable_columns(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    store = sqlite_store
    conversation = await store.get_or_create_conversation("slack:T:C:1.0", channel_key="slack:T:C")
    run = await store.start_run(conversation.id, user_id="U1")
    await store.append_message(
        conversation.id,
        UserMessage(content="hi", author=Author(id="U1", name="Ada"), platform_message_id="1.1"),
    )
    await store.append_message(conversation.id, AssistantMessage(), run_id=run.id)
    await store.close()

    with sqlite3.connect(db_path) as raw:
        rows = raw.execute(
            "SELECT seq, role, author_id, author_name, platform_message_id, run_id "
            "FROM messages ORDER BY seq"
        ).fetchall()
    assert rows == [(1, "user", "U1", "Ada", "1.1", None), (2, "assistant", None, None, None, 1)]


async def test_conversations_are_found_by_key_and_keep_title_and_settings(
    store: ConversationStore, clock: FakeClock
) -> None:
    created = await store.get_or_create_conversation(
        "discord:G1:C9", channel_key="discord:G1:C9", title="Release plan"
    )
    assert await store.get_conversation("discord:G1:C9") == created
    assert await store.get_conversation("discord:G1:nope") is None
    again = await store.get_or_create_conversation("discord:G1:C9", channel_key="ignored")
    assert again == created

    clock.advance(60)
    updated = await store.update_conversation(
        created.id, settings={"model": "claude-opus-4-1", "tools": ["read", "grep"]}
    )
    assert updated.title == "Release plan"
    assert updated.settings == {"model": "claude-opus-4-1", "tools": ["read", "grep"]}
    assert updated.updated_at == created.updated_at + 60
    assert updated.created_at == created.created_at

    clock.advance(1)
    await store.append_message(created.id, UserMessage(content="x"))
    loaded = await store.load(created.id)
    assert loaded.conversation.updated_at == created.updated_at + 61


async def test_loading_gives_the_latest_compaction_and_only_the_messages_after_it(
    store: ConversationStore,
) -> None:
    conversation = await store.get_or_create_conversation("terminal:long", channel_key="t")
    for i in range(1, 11):
        await store.append_message(conversation.id, UserMessage(content=f"m{i}"))

    first = await store.add_compaction(
        conversation.id, "## Goal\nship it", up_to_seq=6, details={"tokens_before": 12345}
    )
    loaded = await store.load(conversation.id)
    assert loaded.compaction == first
    assert loaded.compaction.details == {"tokens_before": 12345}
    assert [s.seq for s in loaded.messages] == [7, 8, 9, 10]
    assert loaded.last_seq == 10

    second = await store.add_compaction(conversation.id, "## Goal\nshipped", up_to_seq=10)
    loaded = await store.load(conversation.id)
    assert loaded.compaction == second
    assert loaded.messages == []
    assert loaded.last_seq == 10

    await store.append_message(conversation.id, UserMessage(content="m11"))
    loaded = await store.load(conversation.id)
    assert [s.seq for s in loaded.messages] == [11]

    with pytest.raises(ValueError, match="outside"):
        await store.add_compaction(conversation.id, "too far", up_to_seq=12)


async def test_unknown_ids_are_refused_and_leave_nothing_behind(store: ConversationStore) -> None:
    with pytest.raises(KeyError):
        await store.append_message(404, UserMessage(content="lost"))
    with pytest.raises(KeyError):
        await store.load(404)
    with pytest.raises(KeyError):
        await store.update_conversation(404, title="x")
    with pytest.raises(KeyError):
        await store.start_run(404)
    with pytest.raises(KeyError):
        await store.add_compaction(404, "s", up_to_seq=1)
    # The failed transactions were rolled back; the store still works.
    conversation = await store.get_or_create_conversation("terminal:after", channel_key="t")
    stored = await store.append_message(conversation.id, UserMessage(content="kept"))
    assert stored.seq == 1


async def test_an_in_memory_store_works_for_demos_and_tests() -> None:
    async with SqliteStore.open(":memory:") as store:
        conversation = await store.get_or_create_conversation("terminal:demo", channel_key="t")
        await store.append_message(conversation.id, UserMessage(content="hi"))
        assert [s.seq for s in (await store.load(conversation.id)).messages] == [1]
