"""Scheduled work on Slack end to end: a due schedule posts a new top-level message in its
channel, attributed to the person who set it up, and the answer streams into its thread.
Real bolt app, FakeSlack, injected clock."""

from __future__ import annotations

from pathlib import Path

from bots.features.scheduler import RETRY_AFTER_S, Scheduler
from bots.features.schedules import NewSchedule, Schedules
from core.models.scripted import Reply, ScriptedModel
from tests.bots.platforms.slack.e2e_harness import ALICE
from tests.bots.platforms.slack.test_commands import CHANNEL, running
from tests.bots.scheduling_helpers import shared
from tests.fakes.slack_server import FakeSlack


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_due_schedule_posts_a_new_message_and_answers_in_its_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="Three incidents last week, all resolved."))
    clock = Clock(1_796_205_600.0)  # 2026-12-02 10:00 UTC
    async with running(fake_slack, tmp_path, models={"scripted": model}) as app:
        settings = app.runner.settings
        channel_key = f"slack:{fake_slack.team_id}:{CHANNEL}"
        await Schedules(app.store, settings, clock=clock).create(
            channel_key,
            NewSchedule("Summarise <!channel> last week's #incidents", cron="0 9 * * 1"),
            by_id=ALICE,
            by_name="alice",
        )
        scheduler = Scheduler(app.runner, settings, clock=clock)
        scheduler.add_platform("slack", app.bot.surfaces)
        assert await scheduler.tick() == []
        clock.now += 6 * 86400  # past Monday 09:00
        assert len(await scheduler.tick()) == 1
        await app.runner.wait_all()

        (head,) = [
            c.args for c in fake_slack.calls_to("chat.postMessage") if "thread_ts" not in c.args
        ]
        assert head["channel"] == CHANNEL
        assert head["text"].startswith(f"⏰ Scheduled by <@{ALICE}> (#1) Summarise")
        assert "<!channel>" not in head["text"] and "&lt;!channel&gt;" in head["text"]
        posted = [m for m in fake_slack.messages[CHANNEL] if m["text"] == head["text"]]
        (message,) = posted
        replies = fake_slack.bot_replies(CHANNEL, message["ts"])
        assert any("Three incidents last week" in str(r) for r in replies)
        conversation = await app.store.get_conversation(f"{channel_key}:{message['ts']}")
        assert conversation is not None
        (request,) = model.requests
        assert "Scheduled task #1" in str(request.messages[-1].content)
        assert await scheduler.tick() == []  # once


async def test_a_schedule_whose_message_slack_refused_is_posted_once_when_slack_is_back(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="All quiet."))
    clock = Clock(1_796_205_600.0)  # 2026-12-02 10:00 UTC
    async with running(fake_slack, tmp_path, models={"scripted": model}) as app:
        settings = app.runner.settings
        channel_key = f"slack:{fake_slack.team_id}:{CHANNEL}"
        await Schedules(app.store, settings, clock=clock).create(
            channel_key, NewSchedule("Check the queue", cron="0 9 * * 1"), by_id=ALICE, by_name="a"
        )
        scheduler = Scheduler(app.runner, settings, clock=clock, shared_clock=shared(clock))
        scheduler.add_platform("slack", app.bot.surfaces)
        clock.now += 6 * 86400  # past Monday 09:00
        fake_slack.fail_next("chat.postMessage", 500, times=50)  # past the client's own retries
        assert await scheduler.tick() == []
        fake_slack.clear_faults()
        assert await scheduler.tick() == []  # tried again only after a pause
        clock.now += RETRY_AFTER_S
        assert len(await scheduler.tick()) == 1
        clock.now += RETRY_AFTER_S
        assert await scheduler.tick() == []
        await app.runner.wait_all()

        heads = [m for m in fake_slack.messages[CHANNEL] if "Scheduled by" in m["text"]]
        (message,) = heads
        replies = fake_slack.bot_replies(CHANNEL, message["ts"])
        assert any("All quiet." in str(r) for r in replies)
        assert len(model.requests) == 1
