"""An interaction delivered twice (a gateway resume replays what the bot may have seen, an
attacker replays what they captured): answered once, acknowledged once, nothing shown twice,
before and after a restart (issue 23, "interaction ids")."""

# ruff: noqa: F811 (pytest fixtures imported by name, then requested as arguments)
from __future__ import annotations

import copy
import re

from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    Teammate,
    discord_settings,
    teammate,
)


def answers(teammate: Teammate, channel: str, text: str) -> int:
    return sum(1 for m in teammate.fake.channel_messages(channel) if m["content"] == text)


async def test_the_same_ask_delivered_twice_is_answered_once(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="Because of gravity."), Reply(text="a second answer"))
    command = teammate.fake.slash_command(
        "ask", {"prompt": "why do rivers flow?"}, channel_id=teammate.general
    )
    await teammate.fake.dispatch("INTERACTION_CREATE", copy.deepcopy(command))
    await teammate.fake.dispatch("INTERACTION_CREATE", copy.deepcopy(command))
    callback = rf"/interactions/{command['id']}/.+/callback"
    await teammate.fake.wait_for(
        lambda: answers(teammate, teammate.general, "Because of gravity.") == 1
    )
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    await teammate.runner.wait(f"discord:{next(iter(teammate.fake.guilds))}:{head['id']}")

    assert len(teammate.model.requests) == 1
    # Acknowledged once: a second defer would get Discord's 40060 and log an error.
    assert len(teammate.fake.requests_to("POST", callback)) == 1
    assert answers(teammate, teammate.general, "a second answer") == 0
    assert not [m for m in teammate.fake.channel_messages(teammate.general) if "⚠️" in m["content"]]


async def test_a_replayed_ask_after_a_restart_starts_nothing(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="Once."), Reply(text="Twice."))
    command = teammate.fake.slash_command("ask", {"prompt": "hello"}, channel_id=teammate.general)
    await teammate.fake.dispatch("INTERACTION_CREATE", copy.deepcopy(command))
    await teammate.fake.wait_for(lambda: answers(teammate, teammate.general, "Once.") == 1)
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    await teammate.runner.wait(f"discord:{next(iter(teammate.fake.guilds))}:{head['id']}")

    # The bot's memory of recent deliveries is gone; the store's is not.
    await teammate.stop_bot()
    await teammate.start_bot()
    await teammate.fake.dispatch("INTERACTION_CREATE", copy.deepcopy(command))
    callback = rf"/interactions/{command['id']}/.+/callback"
    original = rf"/webhooks/\d+/{re.escape(command['token'])}/messages/@original"
    # Discord refuses a second acknowledgement (40060); the bot must start nothing more.
    await teammate.fake.wait_for(lambda: len(teammate.fake.requests_to("POST", callback)) == 2)
    await teammate.runner.wait_all()

    assert len(teammate.model.requests) == 1
    assert answers(teammate, teammate.general, "Twice.") == 0
    assert all(
        (r.json or {}).get("content") != "Twice."
        for r in teammate.fake.requests_to("PATCH", original)
    )
