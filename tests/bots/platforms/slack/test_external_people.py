"""People of another organisation (a Slack Connect channel) do not drive the team's assistant
unless its admins let their organisation in (issue 23, item 2): they would run the team's
tools on the team's budget. Payloads shaped like Slack's: the envelope marks the channel
`is_ext_shared_channel`, the event names the author's workspace in `user_team`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bots.platforms.slack.refusals import EXTERNAL_TEXT
from bots.settings import SlackSettings
from core.models.scripted import Reply, ScriptedModel
from tests.bots.platforms.slack.e2e_harness import message_event, running
from tests.fakes.slack_server import FakeSlack

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
