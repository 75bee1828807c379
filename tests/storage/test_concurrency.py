"""Many conversations at once, a second process on the same file, and cancelled callers."""

from __future__ import annotations

import asyncio

from core.messages import AssistantMessage, Text, UserMessage
from storage.base import ConversationStore
from tests.storage.conftest import Backend


async def test_200_conversations_appending_at_once_all_succeed_in_order(
    store: ConversationStore,
) -> None:
    per_conversation = 15

    async def converse(n: int) -> int:
        conversation = await store.get_or_create_conversation(
            f"slack:T:C{n % 7}:{n}", channel_key=f"slack:T:C{n % 7}"
        )
        run = await store.start_run(conversation.id, user_id=f"U{n}")
        for i in range(per_conversation):
            message = (
                UserMessage(content=f"{n}/{i}")
                if i % 2 == 0
                else AssistantMessage(content=[Text(text=f"{n}/{i}")])
            )
            stored = await store.append_message(conversation.id, message, run_id=run.id)
            assert stored.seq == i + 1
            await store.claim_delivery(f"ev-{n}-{i}")
        await store.finish_run(run.id, "done")
        return conversation.id

    ids = await asyncio.gather(*(converse(n) for n in range(200)))

    assert len(set(ids)) == 200
    for n, conversation_id in enumerate(ids):
        loaded = await store.load(conversation_id)
        assert [s.seq for s in loaded.messages] == list(range(1, per_conversation + 1))
        assert [s.message.text() for s in loaded.messages] == [
            f"{n}/{i}" for i in range(per_conversation)
        ]
    assert await store.running_runs() == []


async def test_two_stores_on_one_database_share_a_conversation_without_locking_errors(
    backend: Backend,
) -> None:
    # e.g. the bot and a `teammate` CLI command open the same database at the same time, or
    # two instances share one PostgreSQL database.
    async with backend.open() as bot, backend.open() as cli:
        conversation = await bot.get_or_create_conversation("terminal:shared", channel_key="t")
        assert (await cli.get_conversation("terminal:shared")) == conversation

        async def write(store: ConversationStore, name: str) -> list[int]:
            seqs = []
            for i in range(60):
                stored = await store.append_message(
                    conversation.id, UserMessage(content=f"{name}{i}")
                )
                seqs.append(stored.seq)
                await store.claim_delivery(f"{name}{i}")
            return seqs

        jobs = [write(bot, "bot") for _ in range(3)] + [write(cli, "cli") for _ in range(3)]
        results = await asyncio.gather(*jobs)
        all_seqs = sorted(seq for seqs in results for seq in seqs)
        assert all_seqs == list(range(1, 361))
        for seqs in results:
            assert seqs == sorted(seqs)

        loaded = await cli.load(conversation.id)
        assert [s.seq for s in loaded.messages] == list(range(1, 361))
        texts = sorted(s.message.text() for s in loaded.messages)
        expected = sorted(
            f"{name}{i}" for name in ("bot", "cli") for i in range(60) for _ in range(3)
        )
        assert texts == expected


async def test_a_cancelled_caller_leaves_the_store_consistent_and_usable(
    store: ConversationStore,
) -> None:
    conversation = await store.get_or_create_conversation("terminal:cancel", channel_key="t")
    tasks = [
        asyncio.create_task(store.append_message(conversation.id, UserMessage(content=str(i))))
        for i in range(50)
    ]
    await asyncio.sleep(0)
    for task in tasks[::3]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    # Every append either fully happened or not at all; seqs stay gap-free.
    stored = await store.append_message(conversation.id, UserMessage(content="after"))
    loaded = await store.load(conversation.id)
    assert [s.seq for s in loaded.messages[: stored.seq]] == list(range(1, stored.seq + 1))
    assert loaded.messages[stored.seq - 1].message.text() == "after"
    # (A cancelled caller's append may still commit after a later call: on PostgreSQL
    # concurrent calls run on several connections. Later ones still get gap-free seqs.)
    assert [s.seq for s in loaded.messages] == list(range(1, len(loaded.messages) + 1))
