"""People of another organisation (a Slack Connect channel) do not drive the team's assistant
unless its admins let their organisation in (issue 23, item 2): they would run the team's
tools on the team's budget. Payloads shaped like Slack's: the envelope marks the channel
`is_ext_shared_channel`, the event names the author's workspace in `user_team`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bots.platforms.slack.blocks import STOP_ACTION_ID
from bots.platforms.slack.refusals import EXTERNAL_TEXT
from bots.settings import SlackSettings
from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import ALICE, message_event, running
from tests.bots.platforms.slack.test_e2e_forged_clicks import (
    answered,
    feedback_button,
    feedback_click,
    votes,
)
from tests.bots.platforms.slack.test_e2e_stop import click, stop_button
from tests.fakes.slack_server import FakeSlack
from tests.fakes.waiting_tool import WaitTool

OTHER_ORG = "T0THERORG"


def connect_event(fake: FakeSlack, text: str, *, user_team: str) -> dict[str, Any]:
    event = message_event(fake, text)
    event.update(user_team=user_team, source_team=user_team, user="U0THER1")
    body = fake.event_callback(event)
    body["is_ext_shared_channel"] = True
    return body


async def test_a_person_of_another_organisation_is_told_and_not_answered(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="our own")])
    async with running(fake_slack, tmp_path, model) as app:
        await app.send(connect_event(fake_slack, "run bash for me", user_team=OTHER_ORG))
        # Someone of the installing workspace in the same shared channel is answered.
        ours = message_event(fake_slack, "hello")
        body = fake_slack.event_callback(ours)
        body["is_ext_shared_channel"] = True
        ours.update(user_team=fake_slack.team_id)
        await app.send(body)
        await app.settle()
    assert len(model.requests) == 1
    assert [e["text"] for e in fake_slack.ephemerals] == [EXTERNAL_TEXT]
    assert fake_slack.ephemerals[0]["user"] == "U0THER1"


async def test_an_organisation_let_in_is_answered(fake_slack: FakeSlack, tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="welcome")])
    slack = SlackSettings(external_teams=[OTHER_ORG])
    async with running(fake_slack, tmp_path, model, slack=slack) as app:
        await app.send(connect_event(fake_slack, "hello", user_team=OTHER_ORG))
        await app.settle()
    assert len(model.requests) == 1 and fake_slack.ephemerals == []


def clicked_by_other_org(payload: dict[str, Any]) -> dict[str, Any]:
    """A click as Slack sends it from a Slack Connect channel: the clicker's own workspace in
    `user.team_id` (and in `team`, the workspace the click came from)."""
    payload["user"] = {"id": "U0THER1", "username": "other", "team_id": OTHER_ORG}
    payload["team"] = {"id": OTHER_ORG, "domain": "other"}
    return payload


async def test_a_person_of_another_organisation_cannot_stop_or_rate_an_answer(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """Stop and 👍/👎 are the team's: a Slack Connect guest's click is refused with the same
    private note as their messages, and stops or counts nothing."""
    tool = WaitTool()
    model = ScriptedModel([Reply(text="rated"), Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        rated = await answered(app, "C1")
        message, value = feedback_button(app, "C1", rated)
        vote = clicked_by_other_org(feedback_click(app, message, value, ALICE, "C1"))
        await app.send(vote, kind="interactive")
        await app.settle()
        assert await votes(app, "C1") == (0, 0)

        event = message_event(fake_slack, "wait for it", channel="C1")
        await app.event(event)
        await asyncio.wait_for(tool.started.wait(), 10)
        await fake_slack.wait_for(lambda f: stop_button(f, "C1", event["ts"]) is not None)
        found = stop_button(fake_slack, "C1", event["ts"])
        assert found is not None
        stop_message, run = found
        stop = clicked_by_other_org(click(fake_slack, stop_message, STOP_ACTION_ID, run))
        await app.send(stop, kind="interactive")
        await app.bot.drain()
        key = f"slack:{fake_slack.team_id}:C1:{event['ts']}"
        assert app.runner.current_run(key) == int(run) and tool.saw == []  # still running
        assert [e["text"] for e in fake_slack.ephemerals] == [EXTERNAL_TEXT, EXTERNAL_TEXT]
        # Someone of the team stops it with the same button.
        await app.send(click(fake_slack, stop_message, STOP_ACTION_ID, run), kind="interactive")
        await app.settle()
    assert len(tool.saw) == 1 and tool.saw[0][0] is True


async def test_a_click_from_a_sibling_workspace_of_the_same_enterprise_is_the_teams(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """In an Enterprise Grid, `user.team_id` holds the organisation's id (E…): a colleague."""
    model = ScriptedModel(default=Reply(text="rated"))
    async with running(fake_slack, tmp_path, model) as app:
        rated = await answered(app, "C1")
        message, value = feedback_button(app, "C1", rated)
        vote = feedback_click(app, message, value, ALICE, "C1")
        vote["user"]["team_id"] = "E0RG"
        vote["team"] = {"id": "T0SIBLING", "domain": "sibling", "enterprise_id": "E0RG"}
        vote["enterprise"] = {"id": "E0RG", "name": "Org"}
        await app.send(vote, kind="interactive")
        await app.settle()
        assert await votes(app, "C1") == (0, 1)
        assert fake_slack.ephemerals == []
