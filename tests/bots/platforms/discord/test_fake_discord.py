"""The fake Discord against the real discord.py: what a bot does reaches the fake, and what the
fake sends reaches the bot's handlers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import pytest
from discord import app_commands
from discord.ext import commands

from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord, point_discord_py_at


class RecordingBot(commands.Bot):
    """A bot with one slash command that defers then follows up, recording what it saw."""

    def __init__(self, guild_id: str | None = None) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(command_prefix="!", intents=intents, guild_ready_timeout=0.05)
        self.seen_messages: list[discord.Message] = []
        self.asked: list[str] = []
        self.ready_event = asyncio.Event()
        self.resumed_event = asyncio.Event()
        self._guild_id = guild_id
        self._changed = asyncio.Condition()

        @app_commands.command(name="ask", description="Ask Teammate")
        async def ask(interaction: discord.Interaction, prompt: str) -> None:
            self.asked.append(prompt)
            await interaction.response.defer(thinking=True)
            await interaction.followup.send(f"answer to {prompt}")

        self.tree.add_command(ask)

    async def setup_hook(self) -> None:
        if self._guild_id is not None:
            guild = discord.Object(id=int(self._guild_id))
            self.tree.copy_global_to(guild=guild)
            await self.tree.sync(guild=guild)
        else:
            await self.tree.sync()

    async def on_ready(self) -> None:
        self.ready_event.set()

    async def on_resumed(self) -> None:
        self.resumed_event.set()

    async def on_message(self, message: discord.Message) -> None:
        self.seen_messages.append(message)
        async with self._changed:
            self._changed.notify_all()

    async def seen(self, count: int) -> list[discord.Message]:
        """The messages seen, once there are `count` of them (a hang is the failure)."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.seen_messages) >= count), 15
            )
        return self.seen_messages


@pytest.fixture
async def bot(fake_discord: FakeDiscord) -> AsyncIterator[RecordingBot]:
    guild_id = next(iter(fake_discord.guilds))
    fake_discord.add_channel(guild_id, name="general")
    bot = RecordingBot(guild_id)
    task = asyncio.create_task(bot.start(BOT_TOKEN))
    ready = asyncio.create_task(bot.ready_event.wait())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()  # login failed: show why
    try:
        yield bot
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)


def general(fake: FakeDiscord) -> dict[str, Any]:
    return next(c for c in fake.channels.values() if c.get("name") == "general")


async def test_the_bot_logs_in_identifies_and_is_ready(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    assert bot.user is not None and str(bot.user.id) == fake_discord.bot_id
    assert bot.application_id == int(fake_discord.application_id)
    (identify,) = fake_discord.identifies
    assert identify["token"] == BOT_TOKEN
    assert identify["intents"] == bot.intents.value
    assert fake_discord.compressions == ["zlib-stream"]  # what discord.py asks without zstd
    guild_id = next(iter(fake_discord.guilds))
    assert bot.get_guild(int(guild_id)) is not None
    assert bot.get_channel(int(general(fake_discord)["id"])) is not None
    me = fake_discord.requests_to("GET", "/users/@me")
    assert me and me[0].headers["authorization"] == f"Bot {BOT_TOKEN}"
    # setup_hook synced the command to the development guild.
    (sync,) = fake_discord.requests_to("PUT", rf"/applications/\d+/guilds/{guild_id}/commands")
    assert [command["name"] for command in sync.json] == ["ask"]
    assert sync.json[0]["options"][0]["name"] == "prompt"


async def test_a_dispatched_message_reaches_on_message(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    payload = fake_discord.message_payload(general(fake_discord)["id"], "hello", mention_bot=True)
    await fake_discord.dispatch("MESSAGE_CREATE", payload)
    (message,) = await bot.seen(1)
    assert message.content == f"<@{fake_discord.bot_id}> hello"
    assert message.guild is not None and bot.user in message.mentions


async def test_a_slash_command_is_deferred_and_followed_up(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel_id = general(fake_discord)["id"]
    payload = fake_discord.slash_command("ask", {"prompt": "why?"}, channel_id=channel_id)
    await fake_discord.dispatch("INTERACTION_CREATE", payload)
    follow_ups = rf"/webhooks/{fake_discord.application_id}/{payload['token']}"
    await fake_discord.wait_for(lambda: bool(fake_discord.requests_to("POST", follow_ups)))
    assert bot.asked == ["why?"]
    (callback,) = fake_discord.requests_to("POST", rf"/interactions/{payload['id']}/.+/callback")
    assert callback.json == {"type": 5}  # deferred, "thinking..."
    (follow_up,) = fake_discord.requests_to("POST", follow_ups)
    assert follow_up.json["content"] == "answer to why?"
    assert [m["content"] for m in fake_discord.channel_messages(channel_id)][-1] == (
        "answer to why?"
    )


async def test_a_rate_limited_post_is_retried_once_and_posted_once(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel = bot.get_channel(int(general(fake_discord)["id"]))
    assert isinstance(channel, discord.TextChannel)
    fake_discord.rate_limit_next("POST", rf"/channels/{channel.id}/messages")
    sent = await channel.send("hi")
    assert len(fake_discord.requests_to("POST", rf"/channels/{channel.id}/messages")) == 2
    assert [m["id"] for m in fake_discord.channel_messages(str(channel.id))] == [str(sent.id)]


async def test_a_429_without_via_looks_like_a_ban(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel = bot.get_channel(int(general(fake_discord)["id"]))
    assert isinstance(channel, discord.TextChannel)
    fake_discord.rate_limit_next("POST", rf"/channels/{channel.id}/messages", via=False)
    with pytest.raises(discord.HTTPException):
        await channel.send("hi")


async def test_files_threads_typing_and_reactions_reach_the_fake(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel = bot.get_channel(int(general(fake_discord)["id"]))
    assert isinstance(channel, discord.TextChannel)
    async with channel.typing():
        sent = await channel.send(
            "see attached",
            file=discord.File(fp=__import__("io").BytesIO(b"x" * 10), filename="o.txt"),
        )
    await sent.add_reaction("👍")
    thread = await sent.create_thread(name="a question")
    assert thread.id == sent.id and thread.parent_id == channel.id
    await thread.send("in the thread")
    await fake_discord.wait_for(lambda: bot.get_channel(thread.id) is not None)
    (post,) = [r for r in fake_discord.requests_to("POST", rf"/channels/{channel.id}/messages")]
    assert post.files[0].filename == "o.txt" and post.files[0].data == b"x" * 10
    assert fake_discord.requests_to("POST", rf"/channels/{channel.id}/typing")
    assert fake_discord.requests_to(
        "PUT", rf"/channels/{channel.id}/messages/{sent.id}/reactions/.+/@me"
    )
    assert [m["content"] for m in fake_discord.channel_messages(str(thread.id))] == [
        "in the thread"
    ]


async def test_a_dropped_connection_resumes_and_replays_missed_events(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel_id = general(fake_discord)["id"]
    await fake_discord.disconnect()
    # Sent while the bot is away: the RESUME must replay it.
    await fake_discord.dispatch(
        "MESSAGE_CREATE", fake_discord.message_payload(channel_id, "missed", mention_bot=True)
    )
    assert [m.content.split()[-1] for m in await bot.seen(1)] == ["missed"]
    assert len(fake_discord.identifies) == 1 and len(fake_discord.resumes) == 1
    await bot.resumed_event.wait()
    await fake_discord.request_reconnect()
    await fake_discord.wait_for(lambda: len(fake_discord.resumes) == 2 and fake_discord.ready)
    await fake_discord.dispatch(
        "MESSAGE_CREATE", fake_discord.message_payload(channel_id, "after", mention_bot=True)
    )
    assert [m.content.split()[-1] for m in await bot.seen(2)] == ["missed", "after"]


async def test_an_expired_interaction_token_is_refused(
    bot: RecordingBot, fake_discord: FakeDiscord
) -> None:
    channel_id = general(fake_discord)["id"]
    payload = fake_discord.slash_command("ask", {"prompt": "slow"}, channel_id=channel_id)
    fake_discord.expire_interaction(payload["token"])
    webhook = discord.Webhook.partial(
        int(fake_discord.application_id), payload["token"], client=bot
    )
    with pytest.raises(discord.HTTPException) as refused:
        await webhook.send("late")
    assert refused.value.code == 50027


async def test_the_fixture_restores_discord_py_globals() -> None:
    before = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    fake = FakeDiscord()
    await fake.start()
    restore = point_discord_py_at(fake)
    assert fake.api_base == discord.http.Route.BASE
    restore()
    await fake.close()
    assert before == (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


async def test_the_gateway_speaks_plain_json_when_no_compression_is_asked(
    fake_discord: FakeDiscord,
) -> None:
    url = fake_discord.gateway_url + "?v=10&encoding=json"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        hello = await ws.receive_json()
        assert hello == {"op": 10, "d": {"heartbeat_interval": 41250}}
        await ws.send_json({"op": 1, "d": None})
        assert await ws.receive_json() == {"op": 11}
        await ws.send_json({"op": 2, "d": {"token": "wrong", "intents": 0}})
        closed = await ws.receive()
        assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == 4004
    assert fake_discord.compressions == [None] and fake_discord.heartbeats == 1


async def test_the_endpoint_settings_aim_discord_py_and_are_put_back() -> None:
    from bots.platforms.discord.payloads import use_endpoints

    before = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    restore = use_endpoints("http://127.0.0.1:9/api/v10/", "ws://127.0.0.1:9/gateway")
    assert discord.http.Route.BASE == "http://127.0.0.1:9/api/v10"
    assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == "ws://127.0.0.1:9/gateway"
    restore()
    assert before == (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    unchanged = use_endpoints(None, None)
    assert before == (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    unchanged()
