"""The inbox: a delivery is accepted in one transaction and enters history in delivery order.

Defects D and E of issue 8: two first messages at once stored the backfill twice, and a cancel
between claiming a delivery and storing its message lost the message for good (the platform's
retry was then dropped as a duplicate).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.messages import AssistantMessage, Author, Text, Usage, UserMessage
from storage.base import Accepted, ConversationStore
from storage.sqlite import SqliteStore
from tests.storage.conftest import Backend, FakeClock

KEY = "slack:T:C1:1.0"
CHANNEL = "slack:T:C1"


def user(text: str, author: str = "U1") -> UserMessage:
    return UserMessage(content=text, author=Author(id=author, name=author.lower()), timestamp=1.0)


def texts(messages: Sequence[object]) -> list[str]:
    out: list[str] = []
    for message in messages:
        assert isinstance(message, UserMessage | AssistantMessage)
        content = message.content
        if isinstance(content, str):
            out.append(content)
        else:
            out.append("".join(c.text for c in content if isinstance(c, Text)))
    return out


async def history(store: ConversationStore, conversation_id: int) -> list[str]:
    loaded = await store.load(conversation_id)
    return texts([stored.message for stored in loaded.messages])


async def accept(
    store: ConversationStore, text: str, delivery_id: str | None, **kwargs: object
) -> Accepted:
    accepted = await store.accept_delivery(
        KEY,
        user(text),
        channel_key=CHANNEL,
        delivery_id=delivery_id,
        **kwargs,  # type: ignore[arg-type]
    )
    assert accepted is not None
    return accepted


async def test_a_first_delivery_creates_the_conversation_stores_backfill_and_queues(
    store: ConversationStore, clock: FakeClock
) -> None:
    accepted = await accept(
        store,
        "hello",
        "slack:Ev1",
        backfill=[user("earlier in the thread", "U9")],
        title="a thread",
        surface_ref={"ts": "1.5"},
    )

    assert accepted.created is True
    assert accepted.conversation.key == KEY
    assert accepted.conversation.channel_key == CHANNEL
    assert accepted.conversation.title == "a thread"
    assert accepted.item.conversation_id == accepted.conversation.id
    assert accepted.item.surface_ref == {"ts": "1.5"}
    assert accepted.item.received_at == clock.now
    assert accepted.item.message == user("hello")
    # The backfill is history; the message waits in the inbox until the loop delivers it.
    assert await history(store, accepted.conversation.id) == ["earlier in the thread"]
    assert await store.pending(accepted.conversation.id) == [accepted.item]
    assert await store.pending_conversations() == [accepted.conversation.id]


async def test_a_repeated_delivery_changes_nothing(store: ConversationStore) -> None:
    first = await accept(store, "hello", "slack:Ev1")
    repeat = await store.accept_delivery(
        KEY, user("hello"), channel_key=CHANNEL, delivery_id="slack:Ev1", backfill=[user("b")]
    )

    assert repeat is None
    assert await store.pending(first.conversation.id) == [first.item]
    assert await history(store, first.conversation.id) == []
    assert await store.claim_delivery("slack:Ev1") is False


async def test_without_a_delivery_id_nothing_is_de_duplicated(store: ConversationStore) -> None:
    one = await accept(store, "same", None)
    two = await accept(store, "same", None)

    assert one.item.id != two.item.id
    assert [i.id for i in await store.pending(one.conversation.id)] == [one.item.id, two.item.id]


async def test_two_first_messages_at_once_store_the_backfill_once(store: ConversationStore) -> None:
    # Defect D: both used to see "no messages yet" and both stored the backfill.
    backfill = [user("what the thread said before", "U9")]
    results = await asyncio.gather(
        *(
            store.accept_delivery(
                KEY,
                user(f"first {n}"),
                channel_key=CHANNEL,
                delivery_id=f"ev{n}",
                backfill=backfill,
            )
            for n in range(5)
        )
    )

    accepted = [r for r in results if r is not None]
    assert len(accepted) == 5
    assert sum(a.created for a in accepted) == 1
    conversation_id = accepted[0].conversation.id
    assert await history(store, conversation_id) == ["what the thread said before"]
    pending = await store.pending(conversation_id)
    # Concurrent calls have no order between them (on PostgreSQL they commit in any order).
    assert sorted(texts([p.message for p in pending])) == [f"first {n}" for n in range(5)]


async def test_backfill_is_not_stored_once_the_conversation_has_history(
    store: ConversationStore,
) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    await store.append_message(conversation.id, user("already here"))

    accepted = await accept(store, "hi", "ev1", backfill=[user("backfill")])

    assert accepted.created is False
    assert await history(store, conversation.id) == ["already here"]


def delivery_claimed(db_path: Path, delivery_id: str) -> bool:
    """Read the file from another connection, as a second process would."""
    with sqlite3.connect(db_path) as db:
        row = db.execute("SELECT 1 FROM deliveries WHERE id = ?", (delivery_id,)).fetchone()
    return row is not None


async def test_a_cancel_once_the_delivery_is_claimed_cannot_lose_the_message(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    store = sqlite_store
    # Defect E: the claim and the message were separate transactions. Cancel the caller the
    # moment the claim is visible in the file: the message must be there too, or a retry
    # must be accepted.
    lost = []
    for n in range(20):
        delivery_id = f"ev{n}"
        task = asyncio.create_task(
            store.accept_delivery(
                KEY, user(f"message {n}"), channel_key=CHANNEL, delivery_id=delivery_id
            )
        )
        for _ in range(100_000):  # poll the file as another process would see it
            if task.done() or delivery_claimed(db_path, delivery_id):
                break
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        conversation = await store.get_conversation(KEY)
        pending = [] if conversation is None else await store.pending(conversation.id)
        stored = f"message {n}" in texts([p.message for p in pending])
        if delivery_claimed(db_path, delivery_id) and not stored:
            lost.append(n)
    assert lost == []


async def test_a_cancelled_accept_either_happened_whole_or_can_be_retried(
    store: ConversationStore,
) -> None:
    for n in range(10):
        task = asyncio.create_task(
            store.accept_delivery(KEY, user(f"m{n}"), channel_key=CHANNEL, delivery_id=f"ev{n}")
        )
        for _ in range(n):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        retry = await store.accept_delivery(
            KEY, user(f"m{n}"), channel_key=CHANNEL, delivery_id=f"ev{n}"
        )
        conversation = await store.get_conversation(KEY)
        assert conversation is not None
        pending = texts([p.message for p in await store.pending(conversation.id)])
        # Exactly once in the inbox: by the cancelled call or else by its retry.
        assert pending.count(f"m{n}") == 1, (n, retry)


async def test_deliver_appends_in_the_order_given_and_is_idempotent(
    store: ConversationStore,
) -> None:
    a = await accept(store, "a", "ev-a")
    b = await accept(store, "b", "ev-b")
    c = await accept(store, "c", "ev-c")
    conversation_id = a.conversation.id
    run = await store.start_run(conversation_id)

    first = await store.deliver(conversation_id, [a.item.id], run_id=run.id)
    await store.append_message(conversation_id, AssistantMessage(content=[Text(text="A")]))
    # The loop delivered c before b (its order, not arrival order, is what history keeps).
    later = await store.deliver(conversation_id, [c.item.id, b.item.id, a.item.id])
    again = await store.deliver(conversation_id, [c.item.id, b.item.id])

    assert [s.seq for s in first] == [1]
    assert first[0].message is a.item.message  # handed back as accepted, not parsed again
    assert [s.seq for s in later] == [3, 4]
    assert texts([s.message for s in later]) == ["c", "b"]
    assert again == []
    assert await history(store, conversation_id) == ["a", "A", "c", "b"]
    assert await store.pending(conversation_id) == []
    assert await store.pending_conversations() == []
    loaded = await store.load(conversation_id)
    assert loaded.messages[0].message == user("a")  # author and all, as accepted


async def test_the_same_item_delivered_twice_at_once_enters_history_once(
    store: ConversationStore,
) -> None:
    a = await accept(store, "a", "ev-a")
    conversation_id = a.conversation.id

    results = await asyncio.gather(
        *(store.deliver(conversation_id, [a.item.id, a.item.id]) for _ in range(3))
    )

    assert sorted(len(stored) for stored in results) == [0, 0, 1]
    assert await history(store, conversation_id) == ["a"]


async def test_deliver_refuses_unknown_or_foreign_ids_and_changes_nothing(
    store: ConversationStore,
) -> None:
    a = await accept(store, "a", "ev-a")
    other = await store.accept_delivery(
        "slack:T:C1:2.0", user("x"), channel_key=CHANNEL, delivery_id="ev-x"
    )
    assert other is not None

    with pytest.raises(KeyError):
        await store.deliver(a.conversation.id, [a.item.id, 9999])
    with pytest.raises(KeyError):
        await store.deliver(a.conversation.id, [other.item.id])
    with pytest.raises(KeyError):
        await store.drop(a.conversation.id, [other.item.id], "stop")

    assert await store.pending(a.conversation.id) == [a.item]
    assert await history(store, a.conversation.id) == []
    with pytest.raises(KeyError):
        await store.pending(424242)


async def test_dropped_items_never_enter_history(store: ConversationStore) -> None:
    a = await accept(store, "a", "ev-a")
    b = await accept(store, "b", "ev-b")
    conversation_id = a.conversation.id
    await store.deliver(conversation_id, [a.item.id])

    await store.drop(conversation_id, [a.item.id, b.item.id], "stopped by U2")
    delivered_after_drop = await store.deliver(conversation_id, [b.item.id])

    assert delivered_after_drop == []
    assert await history(store, conversation_id) == ["a"]  # a was delivered: a drop is late
    assert await store.pending(conversation_id) == []


async def test_the_inbox_survives_a_restart(backend: Backend, clock: FakeClock) -> None:
    async with backend.open(clock) as store:
        a = await accept(store, "a", "ev-a", surface_ref={"ts": "9.9"})
        b = await accept(store, "b", "ev-b")
        await store.deliver(a.conversation.id, [a.item.id])

    async with backend.open(clock) as restarted:
        assert await restarted.pending_conversations() == [a.conversation.id]
        assert await restarted.pending(a.conversation.id) == [b.item]
        [stored] = await restarted.deliver(a.conversation.id, [b.item.id])
        assert stored.message == b.item.message  # read back from the file this time
        assert (
            await restarted.accept_delivery(KEY, user("b"), channel_key=CHANNEL, delivery_id="ev-b")
            is None
        )


async def test_a_runs_surface_ref_can_be_updated(store: ConversationStore) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(conversation.id, surface_ref={"channel": "C1"})

    updated = await store.set_run_surface_ref(run.id, {"channel": "C1", "ts": "1.7"})

    assert updated.surface_ref == {"channel": "C1", "ts": "1.7"}
    assert updated.outcome == "running"
    assert (await store.running_runs())[0].surface_ref == {"channel": "C1", "ts": "1.7"}
    with pytest.raises(KeyError):
        await store.set_run_surface_ref(run.id + 100, {})


def message_runs(db_path: Path) -> list[tuple[int, int | None]]:
    """(seq, run_id) of every stored message: which run each belongs to."""
    with sqlite3.connect(db_path) as db:
        return [(int(r[0]), r[1]) for r in db.execute("SELECT seq, run_id FROM messages")]


async def test_a_run_starts_and_delivers_its_first_messages_in_one_call(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    store = sqlite_store
    a = await accept(store, "a", "ev-a")
    b = await accept(store, "b", "ev-b")
    conversation_id = a.conversation.id

    run = await store.start_run(conversation_id, user_id="U1", deliver=[b.item.id, a.item.id])

    assert run.outcome == "running"
    assert await history(store, conversation_id) == ["b", "a"]
    assert message_runs(db_path) == [(1, run.id), (2, run.id)]
    assert await store.pending(conversation_id) == []
    assert await store.deliver(conversation_id, [a.item.id, b.item.id]) == []


async def test_a_run_with_an_unknown_item_to_deliver_is_not_started(
    store: ConversationStore,
) -> None:
    a = await accept(store, "a", "ev-a")

    with pytest.raises(KeyError):
        await store.start_run(a.conversation.id, deliver=[a.item.id, 9999])

    assert await store.running_runs() == []
    assert await store.pending(a.conversation.id) == [a.item]


async def test_a_reply_and_its_usage_are_stored_together(store: ConversationStore) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(conversation.id, user_id="U1", model="m")
    reply = AssistantMessage(content=[Text(text="hi")], usage=Usage(input=10, output=5, cost=0.5))

    stored = await store.append_message(
        conversation.id, reply, run_id=run.id, usage=reply.usage, model="m2"
    )
    await store.append_message(conversation.id, reply, run_id=run.id, usage=Usage())  # no tokens

    assert stored.seq == 1
    assert await store.usage_since(0, user_id="U1") == Usage(input=10, output=5, cost=0.5)
    assert (await store.finish_run(run.id, "done")).usage == Usage(input=10, output=5, cost=0.5)
    with pytest.raises(ValueError, match="run_id"):
        await store.append_message(conversation.id, reply, usage=reply.usage)
    with pytest.raises(KeyError):  # an unknown run: neither the reply nor its usage is kept
        await store.append_message(conversation.id, reply, run_id=run.id + 9, usage=reply.usage)
    assert await store.message_count(conversation.id) == 2
