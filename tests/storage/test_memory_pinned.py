"""A channel's memory and schedules as read back, pinned (issue 15's mutation runs): every
field of a note and a schedule is the one given, on every backend."""

from __future__ import annotations

from storage.base import ConversationStore
from tests.storage.conftest import FakeClock

C1 = "slack:T:C1"


async def test_a_note_read_back_carries_its_channel_author_and_time(
    store: ConversationStore, clock: FakeClock
) -> None:
    made = await store.add_memory_note(
        C1, "deploys on Tuesdays", by="U1", max_notes=5, max_chars=99
    )
    [listed] = await store.memory_notes(C1)
    for note in (made, listed):
        assert (note.id, note.channel_key, note.text) == (made.id, C1, "deploys on Tuesdays")
        assert (note.created_by, note.created_at) == ("U1", clock.now)


async def test_a_schedule_read_back_carries_every_field_given(
    store: ConversationStore, clock: FakeClock
) -> None:
    due = clock.now + 60
    made = await store.add_schedule(
        C1,
        prompt="summarise the week",
        cron="0 9 * * 1",
        timezone="Europe/Paris",
        next_run_at=due,
        by_id="U1",
        by_name="Ada",
        max_active=3,
    )
    [listed] = await store.schedules(C1)
    [found_due] = await store.due_schedules(due, limit=5)
    for schedule in (made, listed, found_due):
        assert (schedule.id, schedule.channel_key, schedule.prompt) == (
            made.id,
            C1,
            "summarise the week",
        )
        assert (schedule.cron, schedule.timezone, schedule.state) == (
            "0 9 * * 1",
            "Europe/Paris",
            "active",
        )
        assert (schedule.next_run_at, schedule.last_run_at) == (due, None)
        assert (schedule.created_by, schedule.created_by_name, schedule.created_at) == (
            "U1",
            "Ada",
            clock.now,
        )
    claimed = await store.claim_schedule(made.id, due_at=due, next_run_at=due + 3600, now=due)
    assert claimed is not None
    assert (claimed.next_run_at, claimed.last_run_at, claimed.state) == (due + 3600, due, "active")
