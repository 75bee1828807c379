"""A message forwarded into the bot's DM is read (issue 28, "A channel"): Discord sends the
forward with empty `content` and the text in `message_snapshots`; it was ignored as empty."""

from __future__ import annotations

from pathlib import Path

from bots.settings import DiscordSettings
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import started_teammate
from tests.fakes.discord_server import FakeDiscord, user_payload


async def test_a_message_forwarded_into_the_dm_is_answered_from_its_text(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    async with started_teammate(fake_discord, tmp_path, DiscordSettings()) as teammate:
        teammate.model.add(Reply(text="That deploy failed on the disk."))
        ada = user_payload(1_400_000_000_000_000_201, "ada", global_name="Ada")
        dm = fake_discord.dm_channel(ada)["id"]
        forward = fake_discord.message_payload(dm, "", author=ada)
        forward["message_reference"] = {"type": 1, "channel_id": "1", "message_id": "2"}
        forward["message_snapshots"] = [
            {
                "message": {
                    "type": 0,
                    "content": "deploy 42 failed: no space left on device",
                    "embeds": [],
                    "attachments": [],
                    "timestamp": "2026-12-04T10:00:00+00:00",
                    "edited_timestamp": None,
                    "flags": 0,
                    "mentions": [],
                    "mention_roles": [],
                }
            }
        ]
        await fake_discord.dispatch("MESSAGE_CREATE", forward)
        await teammate.shown(dm, "That deploy failed on the disk.")
        (request,) = teammate.model.requests
        asked = request.messages[-1].text()
        assert "(forwarded message)" in asked and "no space left on device" in asked
