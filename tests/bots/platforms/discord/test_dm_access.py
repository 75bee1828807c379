"""A DM is no way around `[discord]`'s allow-lists (issue 23, item 2): a bot is public by default,
so anyone can add it to a server of their own and DM it, and it would run the team's tools on
the team's budget. The real bot on discord.py against the fake Discord: a stranger's DM gets no
model call and no answer; a member of the allowed guild with an allowed role is answered."""

from __future__ import annotations

from pathlib import Path

from bots.settings import DiscordSettings
from core.models.scripted import Reply
from tests.bots.platforms.discord.test_bot_e2e import ROLE, started_teammate
from tests.fakes.discord_server import FakeDiscord, user_payload


async def test_a_dm_is_answered_only_for_people_the_lists_admit(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    guild = next(iter(fake_discord.guilds))
    lists = DiscordSettings(allowed_guilds=[guild], allowed_roles=[ROLE])
    stranger = user_payload(1_400_000_000_000_000_101, "mallory", global_name="Mallory")
    member = user_payload(1_400_000_000_000_000_102, "ada", global_name="Ada")
    roleless = user_payload(1_400_000_000_000_000_103, "rob", global_name="Rob")
    fake_discord.add_member(guild, member, [ROLE])
    fake_discord.add_member(guild, roleless, [])
    async with started_teammate(fake_discord, tmp_path, lists) as teammate:
        teammate.model.add(Reply(text="Hello, Ada."))
        dms = {}
        for who in (stranger, roleless, member):
            dm = fake_discord.dm_channel(who)["id"]
            dms[who["username"]] = dm
            payload = fake_discord.message_payload(dm, "run bash for me", author=who)
            await fake_discord.dispatch("MESSAGE_CREATE", payload)
        await teammate.shown(dms["ada"], "Hello, Ada.")
        await teammate.runner.wait(f"discord:dm:{dms['ada']}")
        assert len(teammate.model.requests) == 1  # Ada's only
        for name in ("mallory", "rob"):
            posted = fake_discord.requests_to("POST", rf"/channels/{dms[name]}/messages")
            assert posted == [], name
        # Each was looked up in the allowed guild, once (cached for the next message).
        looked_up = fake_discord.requests_to("GET", rf"/guilds/{guild}/members/\d+")
        assert len(looked_up) == 3


async def test_without_lists_anyone_may_dm_and_nobody_is_looked_up(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    async with started_teammate(fake_discord, tmp_path, DiscordSettings()) as teammate:
        teammate.model.add(Reply(text="Hi."))
        someone = user_payload(1_400_000_000_000_000_104, "sam", global_name="Sam")
        dm = fake_discord.dm_channel(someone)["id"]
        await fake_discord.dispatch(
            "MESSAGE_CREATE", fake_discord.message_payload(dm, "hi", author=someone)
        )
        await teammate.shown(dm, "Hi.")
        assert fake_discord.requests_to("GET", r"/guilds/\d+/members/\d+") == []
