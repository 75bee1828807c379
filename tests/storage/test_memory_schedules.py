"""A channel's memory and scheduled work, on every backend: per channel, bounded in the
database's own transaction, claims that only one caller wins."""

from __future__ import annotations

import asyncio

import pytest

from storage.base import ConversationStore, MemoryFull, Schedule, TooManySchedules
from tests.storage.conftest import Backend, FakeClock

C1, C2 = "slack:T:C1", "slack:T:C2"


async def test_notes_are_kept_per_channel_in_order(store: ConversationStore) -> None:
    first = await store.add_memory_note(
        C1, "deploys on Tuesdays", by="U1", max_notes=5, max_chars=100
    )
    await store.add_memory_note(C2, "other channel", by=None, max_notes=5, max_chars=100)
    second = await store.add_memory_note(C1, "ß ✓ unicode", by=None, max_notes=5, max_chars=100)
    notes = await store.memory_notes(C1)
    assert [n.text for n in notes] == ["deploys on Tuesdays", "ß ✓ unicode"]
    assert [n.id for n in notes] == [first.id, second.id]
    assert notes[0].created_by == "U1" and notes[1].created_by is None
    assert [n.text for n in await store.memory_notes(C2)] == ["other channel"]
    assert await store.memory_notes("slack:T:C3") == []


async def test_a_note_of_another_channel_cannot_be_forgotten(store: ConversationStore) -> None:
    note = await store.add_memory_note(C1, "keep me", by="U1", max_notes=5, max_chars=100)
    assert await store.forget_memory_note(C2, note.id) is False
    assert [n.id for n in await store.memory_notes(C1)] == [note.id]
    assert await store.forget_memory_note(C1, note.id) is True
    assert await store.forget_memory_note(C1, note.id) is False
    assert await store.memory_notes(C1) == []


async def test_memory_is_bounded_by_count_and_by_characters(store: ConversationStore) -> None:
    for i in range(3):
        await store.add_memory_note(C1, f"n{i}", by=None, max_notes=3, max_chars=10)
    with pytest.raises(MemoryFull):
        await store.add_memory_note(C1, "n3", by=None, max_notes=3, max_chars=10)
    await store.clear_memory(C1)
    await store.add_memory_note(C1, "12345678", by=None, max_notes=3, max_chars=10)
    with pytest.raises(MemoryFull):
        await store.add_memory_note(C1, "123", by=None, max_notes=3, max_chars=10)
    await store.add_memory_note(C1, "12", by=None, max_notes=3, max_chars=10)  # exactly 10
    assert [n.text for n in await store.memory_notes(C1)] == ["12345678", "12"]


async def test_concurrent_adds_never_pass_the_bound(backend: Backend, clock: FakeClock) -> None:
    async with backend.open(clock) as one, backend.open(clock) as two:

        async def add(store: ConversationStore, i: int) -> bool:
            try:
                await store.add_memory_note(C1, f"note {i}", by=None, max_notes=5, max_chars=999)
            except MemoryFull:
                return False
            return True

        added = await asyncio.gather(*(add(one if i % 2 else two, i) for i in range(20)))
        assert sum(added) == 5
        assert len(await one.memory_notes(C1)) == 5


async def test_clear_empties_one_channel_only(store: ConversationStore) -> None:
    for text in ("a", "b"):
        await store.add_memory_note(C1, text, by=None, max_notes=5, max_chars=100)
    await store.add_memory_note(C2, "c", by=None, max_notes=5, max_chars=100)
    assert await store.clear_memory(C1) == 2
    assert await store.clear_memory(C1) == 0
    assert await store.memory_notes(C1) == []
    assert len(await store.memory_notes(C2)) == 1


async def test_memory_survives_a_restart(backend: Backend, clock: FakeClock) -> None:
    async with backend.open(clock) as store:
        await store.add_memory_note(C1, "kept", by="U1", max_notes=5, max_chars=100)
    async with backend.open(clock) as restarted:
        assert [n.text for n in await restarted.memory_notes(C1)] == ["kept"]


async def _add(
    store: ConversationStore, channel: str, at: float, cron: str | None = "0 9 * * 1"
) -> Schedule:
    return await store.add_schedule(
        channel,
        prompt="summarise #incidents",
        cron=cron,
        timezone="Europe/Berlin",
        next_run_at=at,
        by_id="U1",
        by_name="Sam",
        max_active=3,
    )


async def test_schedules_are_listed_per_channel_and_cancelled_there_only(
    store: ConversationStore, clock: FakeClock
) -> None:
    first = await _add(store, C1, clock.now + 60)
    other = await _add(store, C2, clock.now + 60, cron=None)
    assert first.state == "active" and first.cron == "0 9 * * 1"
    assert first.timezone == "Europe/Berlin" and first.created_by_name == "Sam"
    assert other.cron is None
    assert [s.id for s in await store.schedules(C1)] == [first.id]
    assert await store.cancel_schedule(C2, first.id) is False  # not that channel's
    assert await store.cancel_schedule(C1, first.id) is True
    assert await store.cancel_schedule(C1, first.id) is False
    assert await store.schedules(C1) == []
    assert await store.due_schedules(clock.now + 3600, limit=10) == [
        s for s in await store.schedules(C2)
    ]


async def test_active_schedules_are_bounded_per_channel(
    store: ConversationStore, clock: FakeClock
) -> None:
    made = [await _add(store, C1, clock.now + 60) for _ in range(3)]
    with pytest.raises(TooManySchedules):
        await _add(store, C1, clock.now + 60)
    await _add(store, C2, clock.now + 60)  # another channel has its own bound
    await store.cancel_schedule(C1, made[0].id)
    await _add(store, C1, clock.now + 60)  # a cancelled one frees its place


async def test_due_schedules_come_earliest_first_and_only_when_due(
    store: ConversationStore, clock: FakeClock
) -> None:
    later = await _add(store, C1, clock.now + 120)
    sooner = await _add(store, C2, clock.now + 60)
    assert await store.due_schedules(clock.now, limit=10) == []
    assert [s.id for s in await store.due_schedules(clock.now + 60, limit=10)] == [sooner.id]
    assert [s.id for s in await store.due_schedules(clock.now + 500, limit=10)] == [
        sooner.id,
        later.id,
    ]
    assert len(await store.due_schedules(clock.now + 500, limit=1)) == 1


async def test_a_claim_moves_the_schedule_and_only_the_first_claim_wins(
    store: ConversationStore, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    schedule = await _add(store, C1, due_at)
    claimed = await store.claim_schedule(
        schedule.id, due_at=due_at, next_run_at=due_at + 3600, now=due_at + 1
    )
    assert claimed is not None
    assert claimed.next_run_at == due_at + 3600 and claimed.last_run_at == due_at + 1
    again = await store.claim_schedule(
        schedule.id, due_at=due_at, next_run_at=due_at + 3600, now=due_at + 2
    )
    assert again is None
    assert await store.due_schedules(due_at + 10, limit=10) == []


async def test_a_claimed_one_off_is_done(store: ConversationStore, clock: FakeClock) -> None:
    due_at = clock.now + 60
    once = await _add(store, C1, due_at, cron=None)
    claimed = await store.claim_schedule(once.id, due_at=due_at, next_run_at=None, now=due_at)
    assert claimed is not None and claimed.state == "done" and claimed.next_run_at is None
    assert await store.schedules(C1) == []
    assert await store.due_schedules(due_at + 9999, limit=10) == []


async def test_a_cancelled_schedule_cannot_be_claimed(
    store: ConversationStore, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    schedule = await _add(store, C1, due_at)
    await store.cancel_schedule(C1, schedule.id)
    assert (
        await store.claim_schedule(schedule.id, due_at=due_at, next_run_at=None, now=due_at) is None
    )


async def test_two_stores_racing_for_one_due_run_claim_it_once(
    backend: Backend, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    async with backend.open(clock) as one, backend.open(clock) as two:
        schedule = await _add(one, C1, due_at)
        claims = await asyncio.gather(
            *(
                store.claim_schedule(
                    schedule.id, due_at=due_at, next_run_at=due_at + 3600, now=due_at
                )
                for _ in range(10)
                for store in (one, two)
            )
        )
        assert sum(claim is not None for claim in claims) == 1


async def test_a_claimed_run_is_pending_until_settled(
    store: ConversationStore, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    schedule = await _add(store, C1, due_at)
    claimed = await store.claim_schedule(
        schedule.id, due_at=due_at, next_run_at=due_at + 3600, now=due_at + 1
    )
    assert claimed is not None
    assert (claimed.pending_due_at, claimed.pending_since, claimed.pending_attempts) == (
        due_at,
        due_at + 1,
        1,
    )
    assert await store.unsettled_schedule_runs(due_at, limit=10) == []  # claimed after that
    (pending,) = await store.unsettled_schedule_runs(due_at + 1, limit=10)
    assert pending.id == schedule.id
    assert await store.settle_schedule_run(schedule.id, due_at=due_at + 3600) is False  # not it
    assert await store.settle_schedule_run(schedule.id, due_at=due_at) is True
    assert await store.settle_schedule_run(schedule.id, due_at=due_at) is False
    assert await store.unsettled_schedule_runs(due_at + 9999, limit=10) == []
    (after,) = await store.schedules(C1)
    assert after.pending_due_at is None and after.pending_attempts == 0
    assert after.next_run_at == due_at + 3600  # settling leaves the next run alone


async def test_a_pending_one_off_is_still_retried_once_done_but_not_once_cancelled(
    store: ConversationStore, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    once = await _add(store, C1, due_at, cron=None)
    recurring = await _add(store, C1, due_at)
    for schedule, after in ((once, None), (recurring, due_at + 3600)):
        assert await store.claim_schedule(schedule.id, due_at=due_at, next_run_at=after, now=due_at)
    assert await store.cancel_schedule(C1, recurring.id)
    (pending,) = await store.unsettled_schedule_runs(due_at + 500, limit=10)
    assert pending.id == once.id and pending.state == "done"
    assert (
        await store.reclaim_schedule_run(
            recurring.id, due_at=due_at, since=due_at, now=due_at + 500
        )
        is None
    )


async def test_two_stores_racing_to_retry_one_pending_run_take_it_once(
    backend: Backend, clock: FakeClock
) -> None:
    due_at = clock.now + 60
    async with backend.open(clock) as one, backend.open(clock) as two:
        schedule = await _add(one, C1, due_at)
        await one.claim_schedule(schedule.id, due_at=due_at, next_run_at=None, now=due_at)
        retries = await asyncio.gather(
            *(
                store.reclaim_schedule_run(
                    schedule.id, due_at=due_at, since=due_at, now=due_at + 200
                )
                for _ in range(10)
                for store in (one, two)
            )
        )
        (taken,) = [retry for retry in retries if retry is not None]
        assert taken.pending_since == due_at + 200 and taken.pending_attempts == 2
        # The next retry must name the new claim time: the old one no longer matches.
        stale = await two.reclaim_schedule_run(
            schedule.id, due_at=due_at, since=due_at, now=due_at + 400
        )
        assert stale is None
