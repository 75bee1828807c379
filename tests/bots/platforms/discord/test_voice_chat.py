"""A mention in a voice channel's text chat is answered there (issue 28, "A channel"): such a
channel has no threads, Discord refuses one (50024), and only a missing permission was handled,
so nobody was answered or told. The real bot on discord.py against the fake Discord, which
refuses a thread where Discord does."""

from __future__ import annotations

from pathlib import Path

from bots.settings import DiscordSettings
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import started_teammate
from tests.fakes.discord_server import FakeDiscord


async def test_a_mention_in_a_voice_channels_chat_is_answered_in_place(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    guild = next(iter(fake_discord.guilds))
    voice = fake_discord.add_channel(guild, name="standup", kind=2)
    voice.update(bitrate=64000, user_limit=0, rtc_region=None)
    async with started_teammate(fake_discord, tmp_path, DiscordSettings()) as teammate:
        teammate.model.add(Reply(text="The standup notes are in the wiki."))
        await fake_discord.dispatch(
            "MESSAGE_CREATE",
            fake_discord.message_payload(voice["id"], "where are the notes?", mention_bot=True),
        )
        await teammate.shown(voice["id"], "The standup notes are in the wiki.")
        assert fake_discord.requests_to("POST", r"/channels/\d+/messages/\d+/threads") == []
