"""Scheduled work on Discord end to end: a due schedule posts a new message in its channel,
attributed to (and pinging only) the person who set it up, opens a thread from it, and the
answer is shown there. The real bot against the fake Discord; an injected clock."""

# The e2e harness's fixtures are imported by name, and tests take them as parameters.
# ruff: noqa: F811

from __future__ import annotations

from bots.features.scheduler import Scheduler
from bots.features.schedules import NewSchedule, Schedules
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    ADA,
    Teammate,
    discord_settings,
    teammate,
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_a_due_schedule_posts_a_message_opens_a_thread_and_answers_there(
    teammate: Teammate,
) -> None:
    assert teammate.bot is not None
    guild = next(iter(teammate.fake.guilds))
    channel_key = f"discord:{guild}:{teammate.general}"
    clock = Clock(1_796_205_600.0)  # 2026-12-02 10:00 UTC
    await Schedules(teammate.store, teammate.settings, clock=clock).create(
        channel_key,
        NewSchedule("Post the @everyone standup summary", at="2026-12-02 11:00"),
        by_id=str(ADA),
        by_name="Ada",
    )
    scheduler = Scheduler(teammate.runner, teammate.settings, clock=clock)
    scheduler.add_platform("discord", teammate.bot)
    teammate.model.add(Reply(text="Standup: all green."))
    clock.now += 3600
    assert await scheduler.tick() == [1]
    assert await scheduler.tick() == []

    (head,) = teammate.fake.channel_messages(teammate.general)
    assert head["content"] == (f"⏰ Scheduled by <@{ADA}> (#1) Post the @everyone standup summary")
    (sent,) = teammate.fake.requests_to("POST", rf"/channels/{teammate.general}/messages")
    mentions = sent.json["allowed_mentions"]
    assert mentions["parse"] == [] and mentions["users"] == [ADA]  # no @everyone, no roles
    thread = head["id"]  # a thread started from a message has the message's id
    await teammate.shown(thread, "Standup: all green.")
    await teammate.runner.wait(f"discord:{guild}:{thread}")
    (request,) = teammate.model.requests
    assert "Scheduled task #1, one-off" in str(request.messages[-1].content)
    assert await teammate.store.schedules(channel_key) == []  # a one-off is done
