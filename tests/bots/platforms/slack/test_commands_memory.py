"""`/teammate memory` end to end on Slack: signed slash commands through the real bolt app,
the real runner and store, FakeSlack; a note added by a person reaches the next answer."""

from __future__ import annotations

from pathlib import Path

from tests.bots.platforms.slack.e2e_harness import ALICE, BOB
from tests.bots.platforms.slack.test_commands import running
from tests.bots.runner_helpers import channel_context
from tests.fakes.slack_server import FakeSlack


async def test_people_list_add_and_forget_notes_and_answers_see_them(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path) as app:
        assert (await app.command("memory"))["text"] == "This channel's memory is empty."
        added = await app.command("memory add The staging database is pg-stage-2.")
        assert added["text"] == "Remembered as #1: The staging database is pg-stage-2."
        await app.command("memory add Ask Bob before touching billing.", user=BOB)
        listing = (await app.command("memory list"))["text"]
        assert "2 of 30 notes" in listing
        assert "#1: The staging database is pg-stage-2." in listing
        assert "#2: Ask Bob before touching billing." in listing

        await app.mention("which database is staging?")
        await app.runner.wait_all()
        request = app.models["scripted"].requests[-1]
        assert "#1: The staging database is pg-stage-2." in channel_context(request)
        assert "pg-stage-2" not in request.system_prompt

        assert (await app.command("memory forget #1"))["text"] == "Forgot note #1."
        assert "no note #1" in (await app.command("memory forget 1"))["text"]
        assert "#1:" not in (await app.command("memory"))["text"]
        # Another channel's memory is its own.
        assert (await app.command("memory", channel="C2"))["text"] == (
            "This channel's memory is empty."
        )
        assert "no note #2" in (await app.command("memory forget 2", channel="C2"))["text"]


async def test_only_admins_clear_and_secrets_are_refused(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path, slack={"admins": [BOB]}) as app:
        await app.command("memory add one")
        await app.command("memory add two")
        refused = await app.command("memory clear", user=ALICE)
        assert refused["text"] == "Only Teammate's admins can clear a channel's memory."
        secret = await app.command("memory add password: hunter2hunter2")
        assert "never keeps credentials" in secret["text"]
        cleared = await app.command("memory clear", user=BOB)
        assert cleared["text"] == "Cleared this channel's memory (2 notes)."
        assert (await app.command("memory"))["text"] == "This channel's memory is empty."
        usage = (await app.command("memory frobnicate"))["text"]
        assert "`/teammate memory add <text>`" in usage


async def test_a_full_memory_is_said_plainly(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with running(fake_slack, tmp_path, memory={"max_notes": 1}) as app:
        await app.command("memory add first")
        full = (await app.command("memory add second"))["text"]
        assert "memory is full (at most 1 note and" in full
        long = (await app.command("memory add " + "x" * 400))["text"]
        assert "at most 300" in long


async def test_admins_set_the_channels_time_zone_for_scheduled_work(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path, slack={"admins": [ALICE]}) as app:
        shown = (await app.command("config"))["text"]
        assert "time zone (scheduled work): UTC (configuration file)" in shown
        refused = (await app.command("config timezone Nowhere/Special"))["text"]
        assert "I don't know the time zone" in refused
        saved = (await app.command("config timezone America/New_York"))["text"]
        assert "time zone (scheduled work): America/New_York (set here)" in saved
        back = (await app.command("config timezone default"))["text"]
        assert "UTC (configuration file)" in back
