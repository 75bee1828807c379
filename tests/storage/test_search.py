"""Full-text search over messages on both backends: what is found, hostile queries, bounds,
and a database made before search existed is indexed when it is upgraded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.messages import AssistantMessage, Text, ToolCall, UserMessage
from storage.base import ConversationStore
from storage.sqlite import SqliteStore
from storage.sqlite_migrations import MIGRATIONS
from storage.trace_records import MAX_SEARCH_RESULTS


async def a_conversation(store: ConversationStore, key: str) -> int:
    return (await store.get_or_create_conversation(key, channel_key=key.rsplit(":", 1)[0])).id


async def test_a_word_of_a_user_or_assistant_message_finds_it(store: ConversationStore) -> None:
    c = await a_conversation(store, "slack:T1:C1:1.0")
    await store.append_message(c, UserMessage(content="Where is the quarterly report?"))
    reply = AssistantMessage(
        content=[
            Text(text="It is in the shared drive."),
            ToolCall(id="t1", name="ls", arguments={}),
        ]
    )
    await store.append_message(c, reply)
    (hit,) = await store.search_messages("quarterly", limit=10)
    assert (hit.conversation_key, hit.seq, hit.role) == ("slack:T1:C1:1.0", 1, "user")
    assert hit.text == "Where is the quarterly report?"
    (hit,) = await store.search_messages("SHARED drive", limit=10)
    assert hit.role == "assistant" and hit.text == "It is in the shared drive."
    assert await store.search_messages("shared report", limit=10) == []  # every word must match


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "report OR",
        "NOT report",
        "report*",
        "(report",
        "text:report",
        "NEAR(report drive)",
        "^report",
        "'; DROP TABLE messages; --",
        "report \x00 drive",
        "-report",
        "   ",
        "",
        '"report" AND "drive"',
        "💥" * 500,
    ],
)
async def test_query_syntax_is_searched_as_text_never_an_error(
    store: ConversationStore, query: str
) -> None:
    c = await a_conversation(store, "slack:T1:C1:1.0")
    await store.append_message(c, UserMessage(content="the report is in the drive"))
    found = await store.search_messages(query, limit=10)
    assert all(hit.conversation_id == c for hit in found)
    assert len(await store.search_messages("report", limit=10)) == 1  # the store still works


async def test_results_are_bounded_newest_first_and_narrowed_to_a_channel(
    store: ConversationStore,
) -> None:
    c1 = await a_conversation(store, "slack:T1:C1:1.0")
    c2 = await a_conversation(store, "slack:T1:C2:1.0")
    for n in range(5):
        await store.append_message(c1, UserMessage(content=f"deploy number {n}"))
    await store.append_message(c2, UserMessage(content="deploy elsewhere"))
    hits = await store.search_messages("deploy", limit=3)
    assert [h.text for h in hits] == ["deploy elsewhere", "deploy number 4", "deploy number 3"]
    only = await store.search_messages("deploy", limit=10, channel_key="slack:T1:C1")
    assert len(only) == 5 and {h.channel_key for h in only} == {"slack:T1:C1"}
    assert len(await store.search_messages("deploy", limit=10**9)) == 6  # bounded, not refused
    assert MAX_SEARCH_RESULTS < 10**9


async def test_an_older_database_is_indexed_when_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = [m for m in MIGRATIONS if m.name < "m011"]
    async with SqliteStore.open(path, migrations=before) as store:
        c = await a_conversation(store, "slack:T1:C1:1.0")
        await store.append_message(c, UserMessage(content="an old message about penguins"))
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM _migrations").fetchone()[0] == len(before)
    async with SqliteStore.open(path) as store:
        (hit,) = await store.search_messages("penguins", limit=5)
        assert hit.text == "an old message about penguins"
