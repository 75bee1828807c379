"""End to end, as an attacker would: button payloads naming another channel's run, forged or
malformed values, and clicks by people who may not use Teammate in that channel. Asserted on
what the store holds and what the fake Slack received (issue 23)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bots.platforms.slack.blocks import FEEDBACK_ACTION_ID, STOP_ACTION_ID
from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import ALICE, BOB, Harness, message_event, running
from tests.bots.platforms.slack.test_e2e_stop import click, stop_button
from tests.fakes.slack_server import FakeSlack
from tests.fakes.waiting_tool import WaitTool


def feedback_button(app: Harness, channel: str, thread_ts: str) -> tuple[dict[str, Any], str]:
    """The answer carrying 👍/👎 in a thread, and its 👎 value (`down:<run id>`)."""
    for message in app.replies(channel, thread_ts):
        for block in message.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("action_id") == FEEDBACK_ACTION_ID:
                    return message, element["negative_button"]["value"]
    raise AssertionError(f"no feedback buttons in {channel}/{thread_ts}")


async def answered(app: Harness, channel: str) -> str:
    event = message_event(app.fake, "hello", channel=channel)
    await app.event(event)
    await app.settle()
    return str(event["ts"])


def in_channel(payload: dict[str, Any], channel: str) -> dict[str, Any]:
    payload["channel"]["id"] = payload["container"]["channel_id"] = channel
    return payload


def feedback_click(
    app: Harness, message: dict[str, Any], value: str, user: str, channel: str
) -> dict[str, Any]:
    payload = click(app.fake, message, FEEDBACK_ACTION_ID, value, user=user)
    payload["actions"][0]["type"] = "feedback_buttons"
    return in_channel(payload, channel)


async def votes(app: Harness, channel: str) -> tuple[int, int]:
    summary = await app.store.usage_summary(0.0, channel_key=f"slack:{app.fake.team_id}:{channel}")
    return summary.votes_up, summary.votes_down


async def test_a_feedback_click_in_one_channel_cannot_rate_a_run_of_another(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="an answer"))
    async with running(fake_slack, tmp_path, model) as app:
        first = await answered(app, "C1")
        second = await answered(app, "C2")
        _, c1_value = feedback_button(app, "C1", first)
        c2_message, _ = feedback_button(app, "C2", second)
        # A click in C2's thread whose value names C1's run.
        await app.send(feedback_click(app, c2_message, c1_value, BOB, "C2"), kind="interactive")
        await app.settle()
        assert await votes(app, "C1") == (0, 0)
        assert await votes(app, "C2") == (0, 0)


async def test_a_feedback_click_by_someone_not_allowed_is_not_counted(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="an answer"))
    async with running(fake_slack, tmp_path, model, allowed_users=[ALICE]) as app:
        thread = await answered(app, "C1")
        message, value = feedback_button(app, "C1", thread)
        await app.send(feedback_click(app, message, value, BOB, "C1"), kind="interactive")
        await app.settle()
        assert await votes(app, "C1") == (0, 0)
        # The person allowed here is counted, with the same button.
        await app.send(feedback_click(app, message, value, ALICE, "C1"), kind="interactive")
        await app.settle()
        assert await votes(app, "C1") == (0, 1)


async def test_a_stop_click_in_one_channel_naming_another_channels_run_stops_nothing(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(text="elsewhere"), Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        c2_thread = await answered(app, "C2")
        c2_message, _ = feedback_button(app, "C2", c2_thread)
        event = message_event(fake_slack, "wait for it", channel="C1")
        await app.event(event)
        await asyncio.wait_for(tool.started.wait(), 10)
        await fake_slack.wait_for(lambda f: stop_button(f, "C1", event["ts"]) is not None)
        found = stop_button(fake_slack, "C1", event["ts"])
        assert found is not None
        c1_message, c1_run = found
        for value in (c1_run, "9" * 18, "9" * 5000, "-1", "1e3", "", "０"):
            forged = in_channel(
                click(fake_slack, c2_message, STOP_ACTION_ID, value, user=BOB), "C2"
            )
            assert await app.send(forged, kind="interactive") == 200
        await app.bot.drain()
        key = f"slack:{fake_slack.team_id}:C1:{event['ts']}"
        assert app.runner.current_run(key) == int(c1_run)  # still running
        assert tool.saw == []
        # The real button still works.
        await app.send(click(fake_slack, c1_message, STOP_ACTION_ID, c1_run), kind="interactive")
        await app.settle()
    assert len(tool.saw) == 1 and tool.saw[0][0] is True
