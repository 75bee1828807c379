"""Feedback on runs (one changeable vote per person per run) and a scope's usage summary."""

from __future__ import annotations

import pytest

from core.messages import Usage, UserMessage
from storage.base import ConversationStore, FeedbackTally
from tests.storage.conftest import Backend, FakeClock


async def a_run(
    store: ConversationStore, channel: str, user: str = "U1", thread: str = "1.0"
) -> int:
    conversation = await store.get_or_create_conversation(
        f"{channel}:{thread}", channel_key=channel
    )
    run = await store.start_run(conversation.id, user_id=user, model="m")
    return run.id


async def test_one_vote_per_person_per_run_the_latest_counting(store: ConversationStore) -> None:
    run = await a_run(store, "slack:T:C1")

    assert await store.set_run_feedback(run, "U1", "up") == FeedbackTally(up=1, down=0)
    assert await store.set_run_feedback(run, "U1", "up") == FeedbackTally(up=1, down=0)
    assert await store.set_run_feedback(run, "U2", "up") == FeedbackTally(up=2, down=0)
    assert await store.set_run_feedback(run, "U1", "down") == FeedbackTally(up=1, down=1)
    assert await store.set_run_feedback(run, "U2", None) == FeedbackTally(up=0, down=1)
    assert await store.set_run_feedback(run, "U2", None) == FeedbackTally(up=0, down=1)


async def test_votes_on_one_run_do_not_count_for_another(store: ConversationStore) -> None:
    first = await a_run(store, "slack:T:C1")
    second = await a_run(store, "slack:T:C1")
    await store.set_run_feedback(first, "U1", "down")

    assert await store.set_run_feedback(second, "U1", "up") == FeedbackTally(up=1, down=0)


async def test_a_vote_naming_a_run_of_another_channel_is_refused(store: ConversationStore) -> None:
    run = await a_run(store, "slack:T:C1")
    with pytest.raises(KeyError):
        await store.set_run_feedback(run, "U1", "down", channel_key="slack:T:C2")
    assert await store.set_run_feedback(run, "U1", "up", channel_key="slack:T:C1") == (
        FeedbackTally(up=1, down=0)
    )


async def test_a_vote_on_an_unknown_run_or_of_an_unknown_kind_is_refused(
    store: ConversationStore,
) -> None:
    run = await a_run(store, "slack:T:C1")
    with pytest.raises(KeyError):
        await store.set_run_feedback(run + 100, "U1", "up")
    with pytest.raises(ValueError):
        await store.set_run_feedback(run, "U1", "meh")  # type: ignore[arg-type]
    assert await store.set_run_feedback(run, "U2", "down") == FeedbackTally(up=0, down=1)


async def test_votes_survive_a_restart(backend: Backend, clock: FakeClock) -> None:
    async with backend.open(clock) as store:
        run = await a_run(store, "slack:T:C1")
        await store.set_run_feedback(run, "U1", "up")
    async with backend.open(clock) as restarted:
        assert await restarted.set_run_feedback(run, "U2", "down") == FeedbackTally(up=1, down=1)


async def test_a_channels_day_counts_its_usage_runs_and_votes_only(
    store: ConversationStore, clock: FakeClock
) -> None:
    yesterday_run = await a_run(store, "slack:T:C1")
    await store.record_usage(yesterday_run, Usage(input=1000, output=1000, cost=1.0))
    await store.set_run_feedback(yesterday_run, "U9", "down")
    clock.advance(3600)
    midnight = clock.now
    clock.advance(60)

    here = await a_run(store, "slack:T:C1", user="U1")
    here_too = await a_run(store, "slack:T:C1", user="U2", thread="2.0")
    elsewhere = await a_run(store, "slack:T:C2", user="U1")
    await store.record_usage(here, Usage(input=10, output=20, cost=0.5))
    await store.record_usage(here_too, Usage(input=1, output=2, cost=0.25))
    await store.record_usage(elsewhere, Usage(input=100, output=200, cost=4.0))
    await store.set_run_feedback(here, "U1", "up")
    await store.set_run_feedback(here, "U2", "up")
    await store.set_run_feedback(here_too, "U1", "down")
    await store.set_run_feedback(elsewhere, "U1", "down")

    day = await store.usage_summary(midnight, channel_key="slack:T:C1")
    assert (day.usage.input, day.usage.output) == (11, 22)
    assert day.usage.cost == pytest.approx(0.75)
    assert (day.runs, day.votes_up, day.votes_down) == (2, 2, 1)

    mine = await store.usage_summary(midnight, user_id="U1")
    assert (mine.usage.input, mine.runs, mine.votes_up, mine.votes_down) == (110, 2, 2, 1)

    everything = await store.usage_summary(0)
    assert (everything.runs, everything.votes_up, everything.votes_down) == (4, 2, 3)

    quiet = await store.usage_summary(midnight, channel_key="slack:T:C3")
    assert (quiet.usage, quiet.runs, quiet.votes_up, quiet.votes_down) == (Usage(), 0, 0, 0)


async def test_a_vote_cast_today_on_yesterdays_answer_counts_today(
    store: ConversationStore, clock: FakeClock
) -> None:
    run = await a_run(store, "slack:T:C1")
    clock.advance(86_400)
    await store.set_run_feedback(run, "U1", "up")

    today = await store.usage_summary(clock.now - 10, channel_key="slack:T:C1")
    assert (today.runs, today.votes_up) == (0, 1)


async def test_a_delivery_known_by_another_name_is_a_repeat(store: ConversationStore) -> None:
    message = UserMessage(content="hi")
    accepted = await store.accept_delivery(
        "slack:T:C1:1.0",
        message,
        channel_key="slack:T:C1",
        delivery_id="slack:C1:1.0",
        also_claim=["slack:event:Ev1"],
    )
    assert accepted is not None

    # The same message as a `message` event (another event id, the same channel+ts)...
    assert (
        await store.accept_delivery(
            "slack:T:C1:1.0",
            message,
            channel_key="slack:T:C1",
            delivery_id="slack:C1:1.0",
            also_claim=["slack:event:Ev2"],
        )
        is None
    )
    # ...claimed nothing: Ev2 is still free.
    assert await store.claim_delivery("slack:event:Ev2") is True
    # A retry of the first event under another primary id is a repeat too.
    assert (
        await store.accept_delivery(
            "slack:T:C1:1.0",
            message,
            channel_key="slack:T:C1",
            delivery_id="slack:other",
            also_claim=["slack:event:Ev1"],
        )
        is None
    )
    assert await store.claim_delivery("slack:other") is True
    assert len(await store.pending(accepted.conversation.id)) == 1


async def test_extra_delivery_ids_alone_de_duplicate(store: ConversationStore) -> None:
    message = UserMessage(content="hi")
    first = await store.accept_delivery(
        "k", message, channel_key="c", delivery_id=None, also_claim=["a", "b", "a"]
    )
    assert first is not None
    again = await store.accept_delivery(
        "k", message, channel_key="c", delivery_id=None, also_claim=["b"]
    )
    assert again is None
    assert await store.claim_delivery("a") is False
