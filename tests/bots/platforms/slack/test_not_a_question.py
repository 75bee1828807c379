"""Messages that look like a person's but ask Teammate nothing (issue 28, "A channel"), fed as
Slack sends them through the real bolt app: Slackbot's notices in the bot's DM, and an edited
mention (Slack sends `app_mention` again, with `edited`, after the de-dup window too)."""

from __future__ import annotations

from pathlib import Path

from bots.platforms.slack.refusals import UNREADABLE_TEXT
from core.models.scripted import Reply, ScriptedModel
from tests.bots.platforms.slack.e2e_harness import message_event, running
from tests.fakes.slack_server import FakeSlack


async def test_slackbots_notice_in_the_dm_costs_no_run_and_gets_no_reply(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="to Slackbot")])
    async with running(fake_slack, tmp_path, model) as app:
        notice = message_event(
            fake_slack,
            "You have been removed from #general by <@U0ADMIN>",
            channel="D0BOTDM",
            user="USLACKBOT",
            mention=False,
            kind="message",
        )
        notice["channel_type"] = "im"
        await app.event(notice)
        await app.settle()
    assert model.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_an_edited_mention_is_answered_once_not_again(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="first answer"), Reply(text="second answer")])
    async with running(fake_slack, tmp_path, model) as app:
        mention = message_event(fake_slack, "what is up?")
        await app.event(mention)
        await app.settle()
        edited = {
            **mention,
            "text": mention["text"] + " (typo fixed)",
            "edited": {"user": mention["user"], "ts": mention["ts"]},
        }
        await app.event(edited)  # a new event id, as Slack sends it
        await app.settle()
    assert len(model.requests) == 1


async def test_a_mention_with_only_a_file_that_cannot_be_opened_is_told_so(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    # A Slack Connect file comes as `check_file_info`, without `url_private_download`.
    model = ScriptedModel([Reply(text="never")])
    async with running(fake_slack, tmp_path, model) as app:
        shared = message_event(fake_slack, "")
        shared["files"] = [{"id": "F0CONNECT1", "file_access": "check_file_info"}]
        await app.event(shared)
        await app.settle()
    assert model.requests == []
    (note,) = fake_slack.ephemerals
    assert note["text"] == UNREADABLE_TEXT and note["user"] == shared["user"]
