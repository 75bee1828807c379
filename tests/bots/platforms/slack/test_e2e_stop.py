"""End to end: the Stop button and `@teammate stop` cancel a running answer; a stale button
says so; feedback buttons store the vote with the run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bots.platforms.slack.blocks import FEEDBACK_ACTION_ID, STOP_ACTION_ID
from bots.runner import STALE_STOP_TEXT
from bots.settings import SlackSettings
from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import (
    ALICE,
    BOB,
    Harness,
    Mode,
    message_event,
    running,
    texts,
)
from tests.fakes.slack_server import FakeSlack
from tests.fakes.waiting_tool import WaitTool


def stop_button(fake: FakeSlack, channel: str, thread_ts: str) -> tuple[dict[str, Any], str] | None:
    """The bot's message in the thread carrying a Stop button, and the button's value."""
    for message in fake.bot_replies(channel, thread_ts):
        for block in message.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("action_id") == STOP_ACTION_ID:
                    return message, element["value"]
    return None


def click(
    fake: FakeSlack, message: dict[str, Any], action_id: str, value: str, user: str = ALICE
) -> dict[str, Any]:
    """A block_actions payload as Slack sends it for a button on `message`."""
    channel = message.get("channel", "C1")
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": fake.team_id},
        "api_app_id": "A0APP",
        "team": {"id": fake.team_id, "domain": "fake"},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
            "thread_ts": message.get("thread_ts"),
        },
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "trigger_id": "1.2.3",
        "response_url": fake.base_url + "response/1",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "b1",
                "value": value,
                "action_ts": "1796000000.000001",
            }
        ],
    }


async def start_waiting(app: Harness, tool: WaitTool) -> dict[str, Any]:
    event = message_event(app.fake, "wait for it")
    await app.event(event)
    await asyncio.wait_for(tool.started.wait(), 10)
    return event


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_stop_button_cancels_the_running_answer(
    fake_slack: FakeSlack, tmp_path: Path, mode: Mode
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, mode=mode, tools=[tool]) as app:
        event = await start_waiting(app, tool)
        await fake_slack.wait_for(lambda f: stop_button(f, "C1", event["ts"]) is not None)
        found = stop_button(fake_slack, "C1", event["ts"])
        assert found is not None
        message, value = found
        assert (
            await app.send(click(fake_slack, message, STOP_ACTION_ID, value), kind="interactive")
            == 200
        )
        await app.settle()
        # The same button clicked again, now stale: nothing runs, the person is told.
        await app.send(
            click(fake_slack, message, STOP_ACTION_ID, value, user=BOB), kind="interactive"
        )
        await app.settle()

    assert len(tool.saw) == 1 and tool.saw[0][0] is True
    assert "black_square_for_stop" in fake_slack.reactions("C1", event["ts"])
    assert stop_button(fake_slack, "C1", event["ts"]) is None  # the button went away
    assert "stopped" in texts(app.replies("C1", event["ts"])).lower()
    stale = [e for e in fake_slack.ephemerals if e.get("user") == BOB]
    assert [e["text"] for e in stale] == [STALE_STOP_TEXT]


async def test_stop_in_text_cancels_the_running_answer(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        event = await start_waiting(app, tool)
        stop = message_event(fake_slack, "stop", thread_ts=event["ts"], user=BOB)
        await app.event(stop)
        await app.event(stop | {"type": "message", "channel_type": "channel"})  # twice
        await app.settle()
        # Nothing runs now: a stop says so, privately.
        again = message_event(fake_slack, "stop", thread_ts=event["ts"], user=BOB)
        await app.event(again)
        await app.settle()

    assert len(tool.saw) == 1 and tool.saw[0][0] is True
    assert len(model.requests) == 1  # "stop" was never sent to the model
    assert "black_square_for_stop" in fake_slack.reactions("C1", event["ts"])
    notes = [e["text"] for e in fake_slack.ephemerals if e.get("user") == BOB]
    assert len(notes) == 1 and "nothing to stop" in notes[0]


async def test_a_feedback_click_is_stored_with_the_run(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="a fine answer")])
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "hello")
        await app.event(event)
        await app.settle()
        voted = None
        for message in app.replies("C1", event["ts"]):
            for block in message.get("blocks") or []:
                for element in block.get("elements") or []:
                    if element.get("action_id") == FEEDBACK_ACTION_ID:
                        voted = message, element["negative_button"]["value"]
        assert voted is not None, "the final answer carries feedback buttons"
        message, value = voted
        payload = click(fake_slack, message, FEEDBACK_ACTION_ID, value)
        payload["actions"][0]["type"] = "feedback_buttons"
        assert await app.send(payload, kind="interactive") == 200
        await app.settle()
        summary = await app.store.usage_summary(0.0, channel_key=f"slack:{fake_slack.team_id}:C1")
    assert (summary.votes_up, summary.votes_down) == (0, 1)


async def test_a_stop_click_from_another_workspace_in_a_shared_channel_stops_the_run(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """A partner organisation let in (`[slack] external_teams`) clicks Stop in a shared channel:
    the button's thread is still the installation's key. (Not let in: test_external_people.)"""
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    partner = SlackSettings(external_teams=["TPARTNER"])
    async with running(fake_slack, tmp_path, model, tools=[tool], slack=partner) as app:
        event = await start_waiting(app, tool)
        await fake_slack.wait_for(lambda f: stop_button(f, "C1", event["ts"]) is not None)
        found = stop_button(fake_slack, "C1", event["ts"])
        assert found is not None
        payload = click(fake_slack, found[0], STOP_ACTION_ID, found[1], user=BOB)
        payload["team"] = {"id": "TPARTNER", "domain": "partner"}
        payload["user"]["team_id"] = "TPARTNER"
        await app.send(payload, kind="interactive")
        await app.settle()
    assert len(tool.saw) == 1
    assert [e for e in fake_slack.ephemerals if e.get("user") == BOB] == []


async def test_unreadable_clicks_change_nothing(fake_slack: FakeSlack, tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="an answer")])
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "hello")
        await app.event(event)
        await app.settle()
        [message, *_] = app.replies("C1", event["ts"])
        for action_id, value in (
            (FEEDBACK_ACTION_ID, "up:999999"),  # no such run
            (FEEDBACK_ACTION_ID, "sideways:1"),
            (STOP_ACTION_ID, "not-a-run"),
        ):
            payload = click(fake_slack, message, action_id, value)
            assert await app.send(payload, kind="interactive") == 200
        await app.settle()
        summary = await app.store.usage_summary(0.0)
    assert (summary.votes_up, summary.votes_down) == (0, 0)
    assert fake_slack.ephemerals == []


async def test_stop_typed_in_a_dm_stops_the_answer_in_its_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        dm = message_event(fake_slack, "wait", channel="D1", mention=False, kind="message")
        await app.event(dm)
        await asyncio.wait_for(tool.started.wait(), 10)
        # A new top-level DM (its own thread), not a reply in the answer's thread.
        stop = message_event(fake_slack, "stop", channel="D1", mention=False, kind="message")
        await app.event(stop)
        await app.settle()
    assert len(tool.saw) == 1 and tool.saw[0][0] is True
    assert fake_slack.ephemerals == []


async def test_slacks_own_stop_button_on_an_agent_session_cancels_the_answer(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        event = await start_waiting(app, tool)
        native = {
            "type": "agent_session_stopped",
            "channel": "C1",
            "thread_ts": event["ts"],
            "user": BOB,
            "streaming_message_ts": [],
            "event_ts": "1796000000.000500",
        }
        for _ in range(2):  # and its retry
            assert await app.event(native, event_id="EvNATIVESTOP") == 200
        await app.settle()
    assert len(tool.saw) == 1 and tool.saw[0][0] is True
    assert "black_square_for_stop" in fake_slack.reactions("C1", event["ts"])
