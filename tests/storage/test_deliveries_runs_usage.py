"""Deliveries are answered once across restarts; runs and their cost are on record."""

from __future__ import annotations

import pytest

from core.messages import Usage
from storage.base import ConversationStore
from tests.storage.conftest import Backend, FakeClock


def assert_usage(actual: Usage, expected: Usage) -> None:
    assert actual.model_dump(exclude={"cost"}) == expected.model_dump(exclude={"cost"})
    assert actual.cost == pytest.approx(expected.cost)


async def test_a_delivery_is_claimed_once_even_across_a_restart(
    backend: Backend, clock: FakeClock
) -> None:
    async with backend.open(clock) as store:
        assert await store.claim_delivery("slack:Ev123") is True
        assert await store.claim_delivery("slack:Ev123") is False
        assert await store.claim_delivery("slack:Ev124") is True

    async with backend.open(clock) as restarted:
        assert await restarted.claim_delivery("slack:Ev123") is False
        assert await restarted.claim_delivery("slack:Ev124") is False
        assert await restarted.claim_delivery("slack:Ev125") is True


async def test_pruning_forgets_only_old_deliveries(
    store: ConversationStore, clock: FakeClock
) -> None:
    await store.claim_delivery("old")
    clock.advance(11 * 60)
    await store.claim_delivery("recent")
    clock.advance(60)

    assert await store.prune_deliveries(older_than_s=10 * 60) == 1
    assert await store.prune_deliveries(older_than_s=10 * 60) == 0
    assert await store.claim_delivery("recent") is False
    assert await store.claim_delivery("old") is True  # forgotten, so claimable again


async def test_a_run_is_recorded_from_start_to_finish_with_its_usage(
    store: ConversationStore, clock: FakeClock
) -> None:
    conversation = await store.get_or_create_conversation(
        "slack:T:C1:1.0", channel_key="slack:T:C1"
    )
    run = await store.start_run(
        conversation.id, user_id="U1", model="claude-sonnet-4-6", surface_ref={"ts": "1.2"}
    )
    assert run.outcome == "running"
    assert run.conversation_key == "slack:T:C1:1.0"
    assert run.channel_key == "slack:T:C1"  # defaulted from the conversation
    assert run.surface_ref == {"ts": "1.2"}
    assert run.finished_at is None
    assert run.usage == Usage()

    await store.record_usage(run.id, Usage(input=100, output=10, cost=0.01))
    await store.record_usage(run.id, Usage(input=5, output=20, cache_read=90, cost=0.02))
    [running] = await store.running_runs()
    assert running.id == run.id
    assert_usage(running.usage, Usage(input=105, output=30, cache_read=90, cost=0.03))

    clock.advance(3)
    done = await store.finish_run(run.id, "done")
    assert done.outcome == "done"
    assert done.finished_at == run.started_at + 3
    assert_usage(done.usage, Usage(input=105, output=30, cache_read=90, cost=0.03))
    assert await store.running_runs() == []

    # The first finish wins: a late outcome cannot rewrite it.
    assert await store.finish_run(run.id, "aborted", error="late") == done

    with pytest.raises(ValueError):
        await store.finish_run(run.id, "running")
    with pytest.raises(KeyError):
        await store.finish_run(9999, "done")
    with pytest.raises(KeyError):
        await store.record_usage(9999, Usage())


async def test_runs_a_crash_interrupted_are_listed_after_a_restart(
    backend: Backend, clock: FakeClock
) -> None:
    async with backend.open(clock) as store:
        one = await store.get_or_create_conversation("slack:T:C1:1.0", channel_key="slack:T:C1")
        two = await store.get_or_create_conversation("slack:T:C2:2.0", channel_key="slack:T:C2")
        finished = await store.start_run(one.id, user_id="U1")
        await store.finish_run(finished.id, "done")
        clock.advance(1)
        crashed_a = await store.start_run(one.id, user_id="U1", surface_ref={"ts": "1.5"})
        clock.advance(1)
        crashed_b = await store.start_run(two.id, user_id="U2", surface_ref={"ts": "2.5"})
        await store.record_usage(crashed_b.id, Usage(input=7, cost=0.5))
        # no finish_run: the process "dies" here

    async with backend.open(clock) as restarted:
        interrupted = await restarted.running_runs()
        assert [r.id for r in interrupted] == [crashed_a.id, crashed_b.id]
        assert [r.surface_ref for r in interrupted] == [{"ts": "1.5"}, {"ts": "2.5"}]
        assert [r.conversation_key for r in interrupted] == ["slack:T:C1:1.0", "slack:T:C2:2.0"]
        assert interrupted[1].usage == Usage(input=7, cost=0.5)

        for run in interrupted:
            closed = await restarted.finish_run(run.id, "interrupted", error="Teammate restarted")
            assert closed.outcome == "interrupted"
            assert closed.error == "Teammate restarted"
        assert await restarted.running_runs() == []


async def test_usage_is_summed_per_conversation_user_and_channel_over_a_time_window(
    store: ConversationStore, clock: FakeClock
) -> None:
    a1 = await store.get_or_create_conversation("slack:T:A:1", channel_key="slack:T:A")
    a2 = await store.get_or_create_conversation("slack:T:A:2", channel_key="slack:T:A")
    b1 = await store.get_or_create_conversation("slack:T:B:1", channel_key="slack:T:B")

    yesterday = clock.now
    run = await store.start_run(a1.id, user_id="U1")
    await store.record_usage(run.id, Usage(input=1000, output=1000, cost=1.0), model="m-old")
    await store.finish_run(run.id, "done")

    clock.advance(24 * 3600)
    today = clock.now
    r1 = await store.start_run(a1.id, user_id="U1")
    await store.record_usage(r1.id, Usage(input=10, output=1, cost=0.10))
    await store.record_usage(r1.id, Usage(input=20, output=2, cache_write=5, cost=0.20))
    r2 = await store.start_run(a2.id, user_id="U2")
    await store.record_usage(r2.id, Usage(input=40, output=4, cost=0.40))
    r3 = await store.start_run(b1.id, user_id="U1")
    await store.record_usage(r3.id, Usage(input=80, output=8, cache_read=3, cost=0.80))

    assert_usage(
        await store.usage_since(today, channel_key="slack:T:A"),
        Usage(input=70, output=7, cache_write=5, cost=0.70),
    )
    assert_usage(
        await store.usage_since(today, conversation_id=a1.id),
        Usage(input=30, output=3, cache_write=5, cost=0.30),
    )
    assert_usage(
        await store.usage_since(today, user_id="U1"),
        Usage(input=110, output=11, cache_read=3, cache_write=5, cost=1.10),
    )
    assert_usage(
        await store.usage_since(today, user_id="U1", channel_key="slack:T:B"),
        Usage(input=80, output=8, cache_read=3, cost=0.80),
    )
    assert_usage(
        await store.usage_since(today),
        Usage(input=150, output=15, cache_read=3, cache_write=5, cost=1.50),
    )
    assert_usage(
        await store.usage_since(yesterday, conversation_id=a1.id),
        Usage(input=1030, output=1003, cache_write=5, cost=1.30),
    )
    assert await store.usage_since(today + 1) == Usage()
    assert await store.usage_since(today, channel_key="slack:T:nobody") == Usage()
