"""Scheduled work: cron and one-off times in a channel's zone (DST included), the `schedule`
tool through the runner, and due work run once as an ordinary run in a new thread of its
channel, attributed to the person who asked; after downtime, once. The clock is injected:
nothing here waits on wall time."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bots.features.channel_config import ChannelConfigs, ConfigChange
from bots.features.scheduler import (
    HEADER_PROMPT_CHARS,
    MAX_START_ATTEMPTS,
    RETRY_AFTER_S,
    StartedThread,
    header_text,
    run_text,
)
from bots.features.schedules import (
    NewSchedule,
    ScheduleRefused,
    check_cron,
    next_cron_run,
    parse_local_time,
)
from bots.runner import ConversationRunner
from core.messages import ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.base import Schedule
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import ADA, history, incoming
from tests.bots.scheduling_helpers import RecordingStarter, Wired, wire
from tests.fakes.recording_surface import RecordingSurface

BERLIN = "Europe/Berlin"
CHANNEL = "slack:T1:C1"
KEY = f"{CHANNEL}:1.1"


def at(text: str) -> float:
    """An instant written in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- times ---------------------------------------------------------------------------------------


def test_a_weekly_cron_keeps_its_wall_clock_time_across_a_dst_change() -> None:
    first = next_cron_run("0 9 * * 1", BERLIN, at("2026-03-20 12:00"))
    assert first == at("2026-03-23 08:00")  # 09:00 CET
    second = next_cron_run("0 9 * * 1", BERLIN, first or 0)
    assert second == at("2026-03-30 07:00")  # 09:00 CEST


def test_a_time_skipped_by_clocks_going_forward_runs_after_the_gap() -> None:
    skipped = next_cron_run("30 2 * * *", BERLIN, at("2026-03-28 12:00"))
    assert skipped == at("2026-03-29 01:00")  # 03:00 CEST: 02:30 did not exist that night
    assert next_cron_run("30 2 * * *", BERLIN, skipped or 0) == at("2026-03-30 00:30")


def test_a_time_repeated_by_clocks_going_back_runs_once() -> None:
    first = next_cron_run("30 2 * * *", BERLIN, at("2026-10-24 12:00"))
    assert first == at("2026-10-25 00:30")  # 02:30 CEST, the first of the two
    assert next_cron_run("30 2 * * *", BERLIN, first or 0) == at("2026-10-26 01:30")


def test_one_off_times_read_in_the_zone_with_dst_edges() -> None:
    assert parse_local_time("2026-12-07 09:00", BERLIN) == at("2026-12-07 08:00")
    assert parse_local_time("2026-07-07T09:00", BERLIN) == at("2026-07-07 07:00")
    assert parse_local_time("2026-03-29 02:30", BERLIN) == at("2026-03-29 01:30")  # 03:30 CEST
    assert parse_local_time("2026-10-25 02:30", BERLIN) == at("2026-10-25 00:30")  # the first
    assert parse_local_time("2026-12-07 09:00+00:00", BERLIN) == at("2026-12-07 09:00")
    with pytest.raises(ScheduleRefused, match="YYYY-MM-DD HH:MM"):
        parse_local_time("next tuesday", BERLIN)


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("*/2 * * * *", "more often than every 5 minutes"),
        ("0,1 9 * * *", "more often than every 5 minutes"),
        ("* 9 * * *", "more often than every 5 minutes"),
        ("61 * * * *", "not a valid cron expression"),
        ("0 9 * *", "5 fields"),
        ("0 9 * * * *", "5 fields"),
        ("0 0 30 2 *", "not a valid cron expression"),
    ],
)
def test_cron_expressions_are_checked(cron: str, why: str) -> None:
    with pytest.raises(ScheduleRefused, match=why):
        check_cron(cron, BERLIN, at("2026-12-02 10:00"), 300.0)


def test_every_five_minutes_is_allowed_and_the_first_run_is_returned() -> None:
    assert check_cron("*/5 * * * *", "UTC", at("2026-12-02 10:01"), 300.0) == at("2026-12-02 10:05")
    # Across clocks going back, every five minutes stays five minutes apart.
    assert check_cron("*/5 * * * *", BERLIN, at("2026-10-24 23:50"), 300.0) > 0


# -- the tool through the runner ------------------------------------------------------------


async def ask(wired_runner: ConversationRunner, text: str) -> None:
    await wired_runner.submit(incoming(text, key=KEY, channel=CHANNEL), RecordingSurface())
    await wired_runner.wait(KEY)


async def test_the_schedule_tool_creates_lists_and_cancels_in_its_channel(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(
        script=[
            Reply(
                tool_calls=[
                    call(
                        "schedule",
                        {"action": "create", "prompt": "Summarise #incidents", "cron": "0 9 * * 1"},
                    ),
                    call(
                        "schedule",
                        {
                            "action": "create",
                            "prompt": "Remind about the demo",
                            "at": "2026-12-03 15:00",
                        },
                    ),
                    call("schedule", {"action": "create", "prompt": "x", "at": "2026-12-01 15:00"}),
                    call("schedule", {"action": "list"}),
                ]
            ),
            Reply(text="Done."),
            Reply(tool_calls=[call("schedule", {"action": "cancel", "id": 1})]),
            Reply(text="Cancelled."),
        ]
    )
    wired = wire(store, tmp_path, model, clock, schedules={"timezone": BERLIN})
    await ask(wired.runner, "every Monday at 9 summarise #incidents; and remind me tomorrow")
    weekly, once, past, listing = [
        m for m in await history(store, KEY) if isinstance(m, ToolResultMessage)
    ]
    assert not weekly.is_error and "next Mon 2026-12-07 09:00 CET" in weekly.text()
    assert "set up by Ada" in weekly.text()
    assert not once.is_error and "next Thu 2026-12-03 15:00 CET" in once.text()
    assert past.is_error and "has passed" in past.text()
    assert "#1: cron `0 9 * * 1`" in listing.text() and "#2: once" in listing.text()
    (made, _) = await store.schedules(CHANNEL)
    assert (made.created_by, made.created_by_name, made.timezone) == (ADA.id, "Ada", BERLIN)
    assert made.next_run_at == at("2026-12-07 08:00")

    await ask(wired.runner, "cancel the Monday one")
    assert [s.id for s in await store.schedules(CHANNEL)] == [2]
    # Only the channel the run is in: another channel's schedules are out of reach.
    assert await store.schedules("slack:T1:C2") == []


async def test_schedules_per_channel_are_bounded_and_the_tool_says_so(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(
        script=[
            Reply(
                tool_calls=[
                    call("schedule", {"action": "create", "prompt": f"p{i}", "cron": "0 9 * * *"})
                    for i in range(3)
                ]
            ),
            Reply(text="ok"),
        ]
    )
    wired = wire(store, tmp_path, model, clock, schedules={"max_per_channel": 2})
    await ask(wired.runner, "three schedules please")
    results = [m for m in await history(store, KEY) if isinstance(m, ToolResultMessage)]
    assert [r.is_error for r in results] == [False, False, True]
    assert "This channel has 2 schedules, the most it may have" in results[2].text()


async def test_the_schedule_tool_is_offered_only_where_its_work_can_be_posted(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="ok"))
    wired = wire(store, tmp_path, model, Clock(at("2026-12-02 10:00")))
    await wired.runner.submit(
        incoming("hi", key="terminal:default", channel="terminal"), RecordingSurface()
    )
    await wired.runner.wait("terminal:default")
    await ask(wired.runner, "hi")
    terminal, slack = model.requests
    assert "schedule" not in {t.name for t in terminal.tools}
    assert "schedule" in {t.name for t in slack.tools}


# -- running due work --------------------------------------------------------------------------


async def test_a_due_task_runs_once_in_a_new_thread_attributed_to_who_asked(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="Here is the summary."))
    wired = wire(store, tmp_path, model, clock)
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("Summarise #incidents", cron="0 9 * * *"), by_id="U7", by_name="Sam"
    )
    assert await wired.scheduler.tick() == []  # not due yet
    clock.now = at("2026-12-03 09:00")
    assert await wired.scheduler.tick() == [made.id]
    assert await wired.scheduler.tick() == []  # the same run is not started twice
    (posted,) = wired.starter.posted
    assert posted.channel_key == CHANNEL and posted.for_user == "U7"
    assert posted.text == "(#1) Summarise #incidents"
    await wired.runner.wait(posted.conversation_key)
    (finished,) = posted.surface.finished()
    assert finished.outcome == "done" and finished.final_text == "Here is the summary."
    (request,) = model.requests
    assert run_text(made, at("2026-12-03 09:00")) in str(request.messages[-1].content)
    assert "[Sam (U7)" in str(request.messages[-1].content)  # attributed like any message
    (again,) = await store.schedules(CHANNEL)
    assert again.next_run_at == at("2026-12-04 09:00") and again.last_run_at == clock.now
    runs = await store.usage_summary(0, user_id="U7")
    assert runs.runs == 1  # an ordinary run, counted for the person (budgets apply)


async def test_after_downtime_a_task_due_many_times_runs_once(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="ok"))
    wired = wire(store, tmp_path, model, clock)
    await wired.schedules.create(
        CHANNEL, NewSchedule("Check the queue", cron="0 * * * *"), by_id="U7", by_name="Sam"
    )
    clock.now = at("2026-12-02 20:30")  # ten hourly runs missed while nothing ran
    assert len(await wired.scheduler.tick()) == 1
    assert await wired.scheduler.tick() == []
    assert len(wired.starter.posted) == 1
    (schedule,) = await store.schedules(CHANNEL)
    assert schedule.next_run_at == at("2026-12-02 21:00")  # the next one after now
    await wired.runner.wait_all()


async def test_a_one_off_runs_once_and_is_done(store: SqliteStore, tmp_path: Path) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="ok"))
    wired = wire(store, tmp_path, model, clock)
    await wired.schedules.create(
        CHANNEL, NewSchedule("Demo reminder", at="2026-12-02 12:00"), by_id="U7", by_name="Sam"
    )
    clock.now = at("2026-12-05 00:00")
    assert len(await wired.scheduler.tick()) == 1
    clock.now += 86400
    assert await wired.scheduler.tick() == []
    assert await store.schedules(CHANNEL) == []
    await wired.runner.wait_all()


async def test_a_cancelled_task_does_not_run(store: SqliteStore, tmp_path: Path) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    wired = wire(store, tmp_path, ScriptedModel(default=Reply(text="ok")), clock)
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("x", cron="0 11 * * *"), by_id="U7", by_name="Sam"
    )
    assert await wired.schedules.cancel(CHANNEL, made.id)
    clock.now = at("2026-12-02 12:00")
    assert await wired.scheduler.tick() == []
    assert wired.starter.posted == []


async def test_work_for_a_platform_not_served_here_is_left_for_an_instance_that_is(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    wired = wire(store, tmp_path, ScriptedModel(default=Reply(text="ok")), clock)
    await wired.schedules.create(
        "discord:G1:C9", NewSchedule("x", cron="0 11 * * *"), by_id="U7", by_name="Sam"
    )
    clock.now = at("2026-12-02 12:00")
    assert await wired.scheduler.tick() == []
    (still,) = await store.due_schedules(clock.now, limit=10)
    assert still.next_run_at == at("2026-12-02 11:00")  # unclaimed


async def test_a_channels_stored_time_zone_wins_over_the_files(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    wired = wire(store, tmp_path, ScriptedModel(), clock, schedules={"timezone": "UTC"})
    configs = ChannelConfigs(store, wired.runner.settings)
    problem, _ = await configs.change(CHANNEL, ConfigChange(timezone="Mars/Olympus"), by="U1")
    assert "I don't know the time zone `Mars/Olympus`" in problem
    problem, _ = await configs.change(CHANNEL, ConfigChange(timezone="Asia/Tokyo"), by="U1")
    assert problem == ""
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("x", cron="0 9 * * *"), by_id="U7", by_name="Sam"
    )
    assert made.timezone == "Asia/Tokyo"
    assert made.next_run_at == at("2026-12-03 00:00")  # 09:00 JST
    other = await wired.schedules.create(
        "slack:T1:C2", NewSchedule("x", cron="0 9 * * *"), by_id="U7", by_name="Sam"
    )
    assert other.timezone == "UTC"


async def test_budgets_apply_to_scheduled_runs(store: SqliteStore, tmp_path: Path) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="should not run"))
    wired = wire(store, tmp_path, model, clock, budgets={"channel_usd_per_day": 0.0})
    await wired.schedules.create(
        CHANNEL, NewSchedule("x", at="2026-12-02 11:00"), by_id="U7", by_name="Sam"
    )
    clock.now = at("2026-12-02 11:00")
    assert len(await wired.scheduler.tick()) == 1
    (posted,) = wired.starter.posted
    await wired.runner.wait(posted.conversation_key)
    (finished,) = posted.surface.finished()
    assert finished.outcome == "error" and "Daily budget reached" in (finished.error_text or "")
    assert model.requests == []


# -- a run that could not be started ------------------------------------------------------------


class FailingStarter(RecordingStarter):
    """A platform that refuses the first `failures` posts (Slack answering 500, say)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise RuntimeError("the platform answered 500")
        return await super().start_thread(channel_key, text, for_user=for_user)


@dataclass
class FailingDaily:
    """A daily 09:00 schedule, due now, in a channel whose platform refuses posts at first."""

    wired: Wired
    starter: FailingStarter
    made: Schedule
    clock: Clock


async def failing_daily(
    store: SqliteStore, tmp_path: Path, failures: int, model: ScriptedModel
) -> FailingDaily:
    clock = Clock(at("2026-12-02 10:00"))
    wired = wire(store, tmp_path, model, clock)
    starter = FailingStarter(failures=failures)
    wired.scheduler.add_platform("slack", starter)
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("Summarise #incidents", cron="0 9 * * *"), by_id="U7", by_name="Sam"
    )
    clock.now = at("2026-12-03 09:00")
    return FailingDaily(wired, starter, made, clock)


async def test_a_run_whose_thread_could_not_be_posted_is_tried_again_and_runs_once(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="Here is the summary."))
    daily = await failing_daily(store, tmp_path, 1, model)
    wired, starter, made, clock = daily.wired, daily.starter, daily.made, daily.clock
    assert await wired.scheduler.tick() == []  # the post failed
    assert await wired.scheduler.tick() == []  # not hammered: tried again after a pause
    clock.now += RETRY_AFTER_S
    assert await wired.scheduler.tick() == [made.id]
    clock.now += RETRY_AFTER_S
    assert await wired.scheduler.tick() == []  # started once
    (posted,) = starter.posted
    await wired.runner.wait(posted.conversation_key)
    (finished,) = posted.surface.finished()
    assert finished.final_text == "Here is the summary."
    (request,) = model.requests
    # The run is the one that was due at 09:00, not a new occurrence.
    assert run_text(made, at("2026-12-03 09:00")) in str(request.messages[-1].content)
    (schedule,) = await store.schedules(CHANNEL)
    assert schedule.next_run_at == at("2026-12-04 09:00")


async def test_a_run_claimed_by_a_process_that_died_before_posting_runs_after_the_restart(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="done"))
    wired = wire(store, tmp_path, model, clock)
    made = await wired.schedules.create(
        CHANNEL, NewSchedule("Demo reminder", at="2026-12-02 12:00"), by_id="U7", by_name="Sam"
    )
    due = at("2026-12-02 12:00")
    # The process that claimed the run died before it posted its thread.
    assert await store.claim_schedule(made.id, due_at=due, next_run_at=None, now=due) is not None
    clock.now = due + 5
    restarted = wire(store, tmp_path, model, clock)
    assert await restarted.scheduler.tick() == []  # the claim may still be alive
    clock.now = due + RETRY_AFTER_S
    assert await restarted.scheduler.tick() == [made.id]
    assert await restarted.scheduler.tick() == []
    (posted,) = restarted.starter.posted
    await restarted.runner.wait(posted.conversation_key)
    (request,) = model.requests
    assert run_text(made, due) in str(request.messages[-1].content)


async def test_a_run_that_cannot_be_posted_is_given_up_after_a_few_attempts(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    daily = await failing_daily(store, tmp_path, 1000, ScriptedModel(default=Reply(text="ok")))
    wired, starter, made, clock = daily.wired, daily.starter, daily.made, daily.clock
    for _ in range(MAX_START_ATTEMPTS + 3):
        assert await wired.scheduler.tick() == []
        clock.now += RETRY_AFTER_S
    assert starter.attempts == MAX_START_ATTEMPTS
    assert f"scheduled run of #{made.id}" in caplog.text and "gave up" in caplog.text
    # The schedule itself goes on: the next day's run is tried afresh.
    starter.failures = 0
    clock.now = at("2026-12-04 09:00")
    assert await wired.scheduler.tick() == [made.id]
    await wired.runner.wait_all()


async def test_a_schedule_cancelled_while_its_run_waits_for_a_retry_does_not_run(
    store: SqliteStore, tmp_path: Path
) -> None:
    daily = await failing_daily(store, tmp_path, 1, ScriptedModel(default=Reply(text="ok")))
    wired, starter, made, clock = daily.wired, daily.starter, daily.made, daily.clock
    assert await wired.scheduler.tick() == []
    assert await wired.schedules.cancel(CHANNEL, made.id)
    clock.now += RETRY_AFTER_S
    assert await wired.scheduler.tick() == []
    assert starter.attempts == 1 and starter.posted == []


async def test_one_tick_starts_every_run_it_can_whatever_comes_before_it(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    wired = wire(store, tmp_path, ScriptedModel(default=Reply(text="ok")), clock)
    by = {"by_id": "U7", "by_name": "Sam"}
    # Earliest of all: work for a platform this process does not serve, due and pending.
    elsewhere = await wired.schedules.create(
        "discord:G1:C9", NewSchedule("elsewhere", cron="0 8 * * *"), **by
    )
    stale = await wired.schedules.create(
        "discord:G1:C9", NewSchedule("elsewhere, pending", at="2026-12-02 10:30"), **by
    )
    given_up = await wired.schedules.create(
        CHANNEL, NewSchedule("given up", cron="0 8 * * *"), **by
    )
    retried = await wired.schedules.create(CHANNEL, NewSchedule("retried", cron="0 8 * * *"), **by)
    taken = await wired.schedules.create(CHANNEL, NewSchedule("taken", cron="0 9 * * *"), **by)
    due = await wired.schedules.create(CHANNEL, NewSchedule("due", cron="0 9 * * *"), **by)
    first, second = at("2026-12-03 08:00"), at("2026-12-03 09:00")
    # Runs claimed earlier by processes that died: one already tried too often.
    claim_time = first - RETRY_AFTER_S
    await store.claim_schedule(stale.id, due_at=at("2026-12-02 10:30"), next_run_at=None, now=0)
    await store.claim_schedule(given_up.id, due_at=first, next_run_at=None, now=claim_time - 1)
    for attempt in range(MAX_START_ATTEMPTS - 1):
        since = claim_time - 1 if attempt == 0 else claim_time
        assert await store.reclaim_schedule_run(
            given_up.id, due_at=first, since=since, now=claim_time
        )
    await store.claim_schedule(retried.id, due_at=first, next_run_at=None, now=claim_time)
    # Another instance takes this one between our look and our claim.
    await store.claim_schedule(taken.id, due_at=second, next_run_at=None, now=second)
    clock.now = second
    original_due = store.due_schedules

    async def due_including_taken(now: float, *, limit: int) -> list[Schedule]:
        found = await original_due(now, limit=limit)
        listed = [replace(taken, next_run_at=second)]  # as it was before it was taken
        return [*found[:1], *listed, *found[1:]]

    store.due_schedules = due_including_taken  # type: ignore[method-assign]
    started = await wired.scheduler.tick()
    assert sorted(started) == sorted([retried.id, due.id])
    assert [p.text for p in wired.starter.posted] == [
        f"(#{retried.id}) retried",
        f"(#{due.id}) due",
    ]
    assert elsewhere.id not in started and stale.id not in started
    await wired.runner.wait_all()


def test_the_thread_header_names_the_schedule_and_a_bounded_prompt() -> None:
    made = Schedule(
        id=7,
        channel_key=CHANNEL,
        prompt="Summarise\n  the   week",
        cron="0 9 * * 1",
        timezone=BERLIN,
        state="active",
        next_run_at=None,
        last_run_at=None,
        created_by="U7",
        created_by_name="Sam",
        created_at=0.0,
    )
    assert header_text(made) == "(#7) Summarise the week"
    exact = replace(made, prompt="x" * HEADER_PROMPT_CHARS)
    assert header_text(exact) == f"(#7) {'x' * HEADER_PROMPT_CHARS}"
    longer = replace(made, prompt="x" * (HEADER_PROMPT_CHARS + 1))
    assert header_text(longer) == f"(#7) {'x' * (HEADER_PROMPT_CHARS - 1)}…"
    due = at("2026-12-07 08:00")
    assert run_text(made, due).startswith(
        "(Scheduled task #7, recurring, cron `0 9 * * 1`, set up by Sam; due "
    )
    once = run_text(replace(made, cron=None), due)
    assert once.startswith("(Scheduled task #7, one-off, set up by Sam; due ")
    assert once.endswith(")\nSummarise\n  the   week")


async def test_the_scheduler_polls_until_closed_and_only_when_enabled(
    store: SqliteStore, tmp_path: Path
) -> None:
    clock = Clock(at("2026-12-02 10:00"))
    model = ScriptedModel(default=Reply(text="ok"))
    disabled = wire(store, tmp_path, model, clock, schedules={"enabled": False})
    disabled.scheduler.start()
    assert disabled.scheduler._task is None
    wired = wire(store, tmp_path, model, clock, schedules={"poll_s": 0.01})
    await wired.schedules.create(
        CHANNEL, NewSchedule("x", at="2026-12-02 11:00"), by_id="U7", by_name="Sam"
    )
    looked = asyncio.Event()
    look = store.due_schedules

    async def due_schedules(now: float, *, limit: int) -> list[Schedule]:
        looked.set()
        return await look(now, limit=limit)

    store.due_schedules = due_schedules  # type: ignore[method-assign]
    posted = asyncio.Event()
    post = wired.starter.start_thread

    async def start_thread(channel_key: str, text: str, *, for_user: str) -> StartedThread:
        posted.set()
        return await post(channel_key, text, for_user=for_user)

    wired.starter.start_thread = start_thread  # type: ignore[method-assign]
    wired.scheduler.start()
    await asyncio.wait_for(looked.wait(), 30)  # the first look found nothing due
    assert not posted.is_set()
    clock.now = at("2026-12-02 11:00")
    await asyncio.wait_for(posted.wait(), 30)  # a later look did
    await wired.scheduler.close()
    assert wired.scheduler._task is None
    await wired.scheduler.close()  # twice is harmless
    await wired.runner.wait_all()


async def test_a_model_in_one_channel_cannot_reach_another_channels_schedules(
    store: SqliteStore, tmp_path: Path
) -> None:
    # A prompt-injected model naming another channel's schedule id (or an absurd one): its
    # own channel's list, "no such schedule", and nothing changed elsewhere (issue 23, Also).
    clock = Clock(at("2026-12-02 10:00"))
    theirs = await store.add_schedule(
        "slack:T1:C2",
        prompt="C2's weekly report",
        cron="0 9 * * 1",
        timezone=BERLIN,
        next_run_at=at("2026-12-07 08:00"),
        by_id="U9",
        by_name="Bo",
        max_active=10,
    )
    model = ScriptedModel(
        script=[
            Reply(
                tool_calls=[
                    call("schedule", {"action": "cancel", "id": theirs.id}),
                    call("schedule", {"action": "cancel", "id": 2**80}),
                    call("schedule", {"action": "list"}),
                ]
            ),
            Reply(text="Done."),
        ]
    )
    wired = wire(store, tmp_path, model, clock, schedules={"timezone": BERLIN})
    await ask(wired.runner, "cancel schedule 1 of #other")
    cancel, absurd, listing = [
        m for m in await history(store, KEY) if isinstance(m, ToolResultMessage)
    ]
    assert cancel.is_error and absurd.is_error
    assert "C2's weekly report" not in listing.text()
    assert [s.id for s in await store.schedules("slack:T1:C2")] == [theirs.id]
