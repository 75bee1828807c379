"""End to end, as an attacker would: button presses whose custom_id names another channel's
run or conversation, presses by people who may not use Teammate in that channel, and malformed
ids. Asserted on what the store holds, what the runner still runs and what the fake received
(issue 23)."""

# ruff: noqa: F811 (pytest fixtures imported by name, then requested as arguments)
from __future__ import annotations

from typing import Any

import pytest

from bots.platforms.discord.bot import FEEDBACK_TEXT
from bots.settings import DiscordSettings
from core.models.scripted import Reply, call
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    ADA,
    BOB,
    Teammate,
    custom_ids,
    discord_settings,
    ephemeral,
    teammate,
)


async def answered(teammate: Teammate, text: str) -> tuple[str, dict[str, Any]]:
    """A question answered in its own thread: the thread's id and the answer with 👍/👎."""
    teammate.model.add(Reply(text=text))
    asked = await teammate.mention("a question")
    thread = asked["id"]
    await teammate.shown(thread, text)
    await teammate.runner.wait(f"discord:{guild(teammate)}:{thread}")
    (answer,) = teammate.fake.channel_messages(thread)
    return thread, answer


def guild(teammate: Teammate) -> str:
    return str(next(iter(teammate.fake.guilds)))


def decoy(teammate: Teammate, channel: str, custom_id: str) -> dict[str, Any]:
    """A message elsewhere carrying a button with a forged id (Discord only delivers a press of
    a button the message has, and discord.py checks it too)."""
    message = teammate.fake.message_payload(channel, "a message with a forged button")
    message["channel_id"] = channel
    button = {"type": 2, "style": 2, "label": "x", "custom_id": custom_id}
    message["components"] = [{"type": 1, "components": [button]}]
    return message


def other_channel(teammate: Teammate) -> str:
    return str(teammate.fake.add_channel(guild(teammate), name="elsewhere")["id"])


async def votes(teammate: Teammate, channel: str) -> tuple[int, int]:
    summary = await teammate.store.usage_summary(
        0, channel_key=f"discord:{guild(teammate)}:{channel}"
    )
    return summary.votes_up, summary.votes_down


async def test_a_feedback_press_in_another_channel_cannot_rate_this_channels_run(
    teammate: Teammate,
) -> None:
    _, answer = await answered(teammate, "Forty-two.")
    up, _ = custom_ids(answer)
    elsewhere = other_channel(teammate)
    press = teammate.fake.button_press(up, decoy(teammate, elsewhere, up), user=BOB)
    assert await ephemeral(teammate, press) != FEEDBACK_TEXT
    assert await votes(teammate, teammate.general) == (0, 0)


@pytest.mark.parametrize("discord_settings", [DiscordSettings(allowed_users=[str(ADA)])])
async def test_a_feedback_press_by_someone_not_allowed_is_not_counted(
    teammate: Teammate,
) -> None:
    _, answer = await answered(teammate, "Forty-two.")
    _, down = custom_ids(answer)
    assert await ephemeral(teammate, teammate.fake.button_press(down, answer, user=BOB)) != (
        FEEDBACK_TEXT
    )
    assert await votes(teammate, teammate.general) == (0, 0)
    assert await ephemeral(teammate, teammate.fake.button_press(down, answer)) == FEEDBACK_TEXT
    assert await votes(teammate, teammate.general) == (0, 1)


async def test_a_stop_press_naming_another_channels_conversation_stops_nothing(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]), Reply(text="Done."))
    asked = await teammate.mention("wait for me")
    thread = asked["id"]
    await teammate.gate.started.wait()
    (stop_id,) = custom_ids(teammate.fake.channel_messages(thread)[0])
    elsewhere = other_channel(teammate)
    key = f"discord:{guild(teammate)}:{thread}"
    run = teammate.runner.current_run(key)
    assert run is not None and stop_id == f"stop:{run}:{thread}"
    for junk in ("stop:x", "s" * 100):  # no button of ours: discord.py drops them
        press = teammate.fake.button_press(junk, decoy(teammate, elsewhere, junk), user=BOB)
        await teammate.fake.dispatch("INTERACTION_CREATE", press)
    for forged in (stop_id, f"stop:{run}:{'9' * 20}", f"stop:{'9' * 18}"):
        press = teammate.fake.button_press(forged, decoy(teammate, elsewhere, forged), user=BOB)
        assert await ephemeral(teammate, press) != "Stopped."
    assert teammate.runner.current_run(key) == run  # still running
    assert teammate.gate.cancelled == 0
    teammate.gate.release.set()
    await teammate.runner.wait(key)
