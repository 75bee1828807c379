"""`/teammate memory` on Discord end to end: the real bot against the fake Discord, the real
runner and store; a note added by a person reaches the next answer in that channel."""

# The e2e harness's fixtures are imported by name, and tests take them as parameters.
# ruff: noqa: F811

from __future__ import annotations

from typing import Any

import pytest

from bots.features.memory import CLEAR_ADMIN_TEXT
from bots.settings import DiscordSettings
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    ADA,
    BOB,
    Teammate,
    discord_settings,
    ephemeral,
    teammate,
)
from tests.bots.runner_helpers import channel_context


def memory(teammate: Teammate, user: dict[str, Any] | None = None, **options: Any) -> Any:
    return teammate.fake.slash_command(
        "teammate", options, subcommand="memory", channel_id=teammate.general, user=user
    )


@pytest.mark.parametrize("discord_settings", [DiscordSettings(admin_users=[str(ADA)])])
async def test_memory_is_listed_added_forgotten_and_cleared_by_admins(
    teammate: Teammate,
) -> None:
    guild = next(iter(teammate.fake.guilds))
    (sync,) = teammate.fake.requests_to("PUT", rf"/applications/\d+/guilds/{guild}/commands")
    (group,) = [c for c in sync.json if c["name"] == "teammate"]
    assert sorted(o["name"] for o in group["options"]) == ["config", "memory"]

    assert await ephemeral(teammate, memory(teammate)) == "This channel's memory is empty."
    added = await ephemeral(teammate, memory(teammate, add="Releases are cut on Thursdays."))
    assert added == "Remembered as #1: Releases are cut on Thursdays."
    await ephemeral(teammate, memory(teammate, user=BOB, add="Bob owns the billing service."))
    listing = await ephemeral(teammate, memory(teammate))
    assert "#1: Releases are cut on Thursdays." in listing and "#2: Bob owns" in listing

    teammate.model.add(Reply(text="Thursdays."))
    asked = await teammate.mention("when are releases cut?")
    await teammate.shown(asked["id"], "Thursdays.")
    request = teammate.model.requests[-1]
    assert "#1: Releases are cut on Thursdays." in channel_context(request)
    assert "Thursdays" not in request.system_prompt

    assert await ephemeral(teammate, memory(teammate, user=BOB, forget=1)) == "Forgot note #1."
    assert await ephemeral(teammate, memory(teammate, user=BOB, clear=True)) == CLEAR_ADMIN_TEXT
    cleared = await ephemeral(teammate, memory(teammate, clear=True))
    assert cleared == "Cleared this channel's memory (1 note)."
    assert await teammate.store.memory_notes(f"discord:{guild}:{teammate.general}") == []


async def test_a_secret_is_not_kept(teammate: Teammate) -> None:
    refused = await ephemeral(teammate, memory(teammate, add="token ghp_abcdefghijklmnopqrstuvwx"))
    assert "never keeps credentials" in refused
    assert await ephemeral(teammate, memory(teammate)) == "This channel's memory is empty."
