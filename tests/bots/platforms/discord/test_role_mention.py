"""Mentioning the bot's own role addresses the bot (issue 28, "A channel"): Discord's `@`
autocomplete offers the bot's managed role beside the bot, and a visible `@Teammate` followed
by silence looks broken. The real bot on discord.py against the fake Discord, with the role
Discord gives a bot in each guild (`tags.bot_id`)."""

from __future__ import annotations

from pathlib import Path

from bots.settings import DiscordSettings
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import started_teammate
from tests.fakes.discord_server import FakeDiscord


async def test_a_mention_of_the_bots_own_role_is_answered_and_another_roles_is_not(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    guild = next(iter(fake_discord.guilds))
    bot_role = fake_discord.add_role(guild, name="Teammate", bot_id=fake_discord.bot_id)
    other_role = fake_discord.add_role(guild, name="ops")
    async with started_teammate(fake_discord, tmp_path, DiscordSettings()) as teammate:
        teammate.model.add(Reply(text="Here to help."))
        for role in (other_role, bot_role):
            payload = fake_discord.message_payload(
                teammate.general, f"<@&{role}> can you look at the deploy?"
            )
            await fake_discord.dispatch("MESSAGE_CREATE", payload)
        thread = payload["id"]  # a mention in a channel opens a thread on the message
        await teammate.shown(thread, "Here to help.")
        await teammate.runner.wait(f"discord:{guild}:{thread}")
        (request,) = teammate.model.requests
        asked = request.messages[-1].text()
        assert "can you look at the deploy?" in asked and f"<@&{bot_role}>" not in asked
