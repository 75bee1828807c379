"""`/stop`, `/reset` and `/new` on Discord end to end (the real bot against the fake Discord,
the real runner and store): inside a thread they act on its conversation, in a channel on
the channel's conversations, as Slack's `/teammate stop` and `reset` do."""

# The e2e harness's fixtures are imported by name, and tests take them as parameters.
# ruff: noqa: F811

from __future__ import annotations

from core.models.scripted import Reply, call
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    Teammate,
    discord_settings,
    ephemeral,
    teammate,
)


async def test_stop_in_the_channel_stops_every_answer_in_progress_there(
    teammate: Teammate,
) -> None:
    stop = teammate.fake.slash_command("stop", channel_id=teammate.general)
    assert await ephemeral(teammate, stop) == "Nothing is in progress in this channel."
    teammate.model.add(Reply(tool_calls=[call("gate")]))
    asked = await teammate.mention("a long job")
    await teammate.gate.started.wait()
    stop = teammate.fake.slash_command("stop", channel_id=teammate.general)
    assert await ephemeral(teammate, stop) == "Stopped 1 answer in this channel."
    key = f"discord:{next(iter(teammate.fake.guilds))}:{asked['id']}"
    await teammate.runner.wait(key)
    assert teammate.gate.cancelled == 1


async def test_reset_in_a_thread_forgets_it_and_in_the_channel_forgets_its_threads(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(text="Noted: PELICAN."))
    teammate.model.add(Reply(text="Noted: FLAMINGO."))
    first = await teammate.mention("remember PELICAN")
    await teammate.shown(first["id"], "Noted: PELICAN.")
    second = await teammate.mention("remember FLAMINGO")
    await teammate.shown(second["id"], "Noted: FLAMINGO.")
    await teammate.runner.wait_all()

    in_thread = teammate.fake.slash_command("new", channel_id=first["id"])
    assert await ephemeral(teammate, in_thread) == (
        "Starting afresh: I won't see the earlier messages here."
    )
    in_channel = teammate.fake.slash_command("reset", channel_id=teammate.general)
    assert "I've forgotten 2 threads here" in await ephemeral(teammate, in_channel)
    teammate.model.add(Reply(text="What word?"))
    follow_up = teammate.fake.message_payload(second["id"], "which word was it?")
    await teammate.fake.dispatch("MESSAGE_CREATE", follow_up)
    await teammate.shown(second["id"], "What word?")
    assert "FLAMINGO" not in str(teammate.model.requests[-1].messages)
