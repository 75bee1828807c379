"""A long Discord answer whose process died while showing it is shown once after the restart.

The real `TeammateBot`, runner and SQLite store answer a mention or an `/ask` with several
Discord messages against `DyingDiscord`, which "kills" the process at a moment it chooses: from
then on every call the old process makes hangs forever (its half-done calls never finish, as
after a SIGKILL), and only a new token is accepted. A new runner on the same store, with a
fresh discord.py client, then recovers. Assertions are on what the fake holds: every part of
the answer exactly once, in order, the text complete, edited in place where needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import discord
import pytest
from aiohttp import web

from bots.platforms.discord.bot import DISCORD_RULES, TeammateBot
from bots.platforms.discord.surface import MESSAGE_LIMIT, WORKING_TEXT, DiscordSurfaces
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings
from bots.surface.markdown_split import split_markdown
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.fakes.discord_server import (
    BOT_TOKEN,
    FakeDiscord,
    RecordedRequest,
    point_discord_py_at,
)

# The same bot (the id is the token's first part), a token only the restarted process has.
RESTARTED_TOKEN = BOT_TOKEN.rsplit(".", 1)[0] + ".restarted-token"

When = Literal["before", "after"]  # the fatal call is not made at all / made, never answered


class DyingDiscord(FakeDiscord):
    """Kills the process talking to it at the first request `kill_at` picks."""

    def __init__(self) -> None:
        super().__init__()
        self.kill_at: Callable[[RecordedRequest], When | None] | None = None
        self.killed = asyncio.Event()
        self._dead_token: str | None = None
        self._buried = asyncio.Event()  # set at teardown: the dead calls end (401)

    def bury(self) -> None:
        self._buried.set()

    async def _answer(self, r: RecordedRequest) -> web.StreamResponse:
        if self._dead_token is not None and (
            r.headers.get("authorization") == f"Bot {self._dead_token}"
            or r.path.startswith(("/webhooks/", "/interactions/"))  # its interactions' tokens
        ):
            return await self._hang()
        when = self.kill_at(r) if self.kill_at is not None else None
        if when is None:
            return await super()._answer(r)
        self.kill_at = None
        if when == "after":
            await super()._answer(r)  # done on Discord's side; the answer never arrives
        self._dead_token, self.token = self.token, RESTARTED_TOKEN
        self.killed.set()
        return await self._hang()

    async def _hang(self) -> web.StreamResponse:
        await self._buried.wait()
        return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)


@dataclass
class Harness:
    fake: DyingDiscord
    store: SqliteStore
    model: ScriptedModel
    settings: Settings
    general: str

    def runner(self, surfaces: DiscordSurfaces | None = None) -> ConversationRunner:
        return ConversationRunner(
            store=self.store,
            settings=self.settings,
            model_factory=lambda _model_id: self.model,
            toolset_factory=lambda _channel: [],
            platform_rules=DISCORD_RULES,
            surfaces=surfaces,
        )


StoreT = TypeVar("StoreT", bound=SqliteStore)
HarnessT = TypeVar("HarnessT", bound=Harness)


@asynccontextmanager
async def dying_harness(
    tmp_path: Path,
    store_type: type[StoreT],
    make: Callable[[DyingDiscord, StoreT, ScriptedModel, Settings, str], HarnessT],
) -> AsyncIterator[HarnessT]:
    """A `DyingDiscord` with a #general channel, discord.py pointed at it, a store of
    `store_type` in `tmp_path`, and the harness `make` builds over them."""
    fake = DyingDiscord()
    await fake.start()
    restore = point_discord_py_at(fake)
    guild_id = next(iter(fake.guilds))
    general = fake.add_channel(guild_id, name="general")["id"]
    store = await store_type.open(tmp_path / "teammate.db")
    settings = Settings(data_dir=tmp_path, discord=DiscordSettings(dev_guild_id=guild_id))
    try:
        yield make(fake, store, ScriptedModel(), settings, general)
    finally:
        fake.bury()
        await store.close()
        restore()
        await fake.close()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with dying_harness(tmp_path, SqliteStore, Harness) as made:
        yield made


async def start(bot: discord.Client, token: str) -> asyncio.Task[None]:
    task = asyncio.create_task(bot.start(token))
    ready = asyncio.create_task(bot.wait_until_ready())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()
    return task


def custom_ids(message: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in message.get("components") or [] for c in row["components"]]


def long_answer(paragraphs: int) -> str:
    return "\n\n".join(
        f"Paragraph {i}: " + " ".join(f"river{i}-{j}" for j in range(40)) for i in range(paragraphs)
    )


def the_end(r: RecordedRequest) -> When | None:
    """The end's first step: the Stop button leaves the head (or feedback joins the last
    part), through the bot token or an interaction's."""
    body = r.json if isinstance(r.json, dict) else {}
    ends = r.method == "PATCH" and "components" in body and "stop:" not in str(body)
    return "before" if ends else None


async def crash_and_recover(h: Harness, answer: str, ask: Callable[[], Awaitable[object]]) -> str:
    """`ask`s the old process; it dies where `h.fake.kill_at` says; a new process recovers.
    The recovered run's conversation key."""
    h.model.add(Reply(text=answer, chunk_size=300))
    first = h.runner()
    old = TeammateBot(first, h.settings, edit_interval_s=0.01, guild_ready_timeout=0.05)
    old_task = await start(old, BOT_TOKEN)
    await ask()
    await asyncio.wait_for(h.fake.killed.wait(), 30)
    # The old process is gone (its calls hang): only the store and what Discord shows remain.
    (running,) = await h.store.running_runs()
    surfaces = DiscordSurfaces()
    client = discord.Client(intents=discord.Intents.none())
    await client.login(RESTARTED_TOKEN)
    surfaces.attach(client)
    restarted = h.runner(surfaces)
    try:
        (recovered,) = await restarted.recover()
        assert recovered.id == running.id and recovered.outcome == "done"
        await restarted.wait(running.conversation_key)
    finally:
        await restarted.close()
        await client.close()
        h.fake.bury()  # the dead process's calls end (refused); then it is cleaned up
        await first.close(timeout_s=5)
        await old.close()
        await asyncio.gather(old_task, return_exceptions=True)
    return running.conversation_key


def assert_shown_once(shown: list[dict[str, Any]], answer: str) -> None:
    parts = split_markdown(answer, MESSAGE_LIMIT)
    assert len(parts) >= 2
    texts = [m["content"] for m in shown]
    assert texts == parts, "each part of the answer exactly once, in order"
    assert "\n\n".join(texts) == answer  # (split at paragraphs: the text is complete)
    assert WORKING_TEXT not in texts
    assert all(custom_ids(m) == [] for m in shown[:-1]), (
        "no Stop button left, feedback only on the last part"
    )
    assert [c.split(":")[0] for c in custom_ids(shown[-1])] == ["feedback", "feedback"]


async def test_killed_after_posting_the_later_parts_the_answer_is_shown_once(
    harness: Harness,
) -> None:
    """Killed once every part was posted (and the end began): recovery edits them in place."""
    h = harness
    answer = long_answer(12)  # three messages
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])  # a thread started from a message has the message's id
    h.fake.kill_at = the_end
    await crash_and_recover(h, answer, lambda: h.fake.dispatch("MESSAGE_CREATE", asked))
    assert_shown_once(h.fake.channel_messages(thread), answer)


async def test_killed_while_a_later_part_was_being_posted_the_answer_is_shown_once(
    harness: Harness,
) -> None:
    """Killed between Discord creating a later part and the process learning its id (so it
    was never stored): recovery finds that message and keeps it, not a second copy."""
    h = harness
    answer = long_answer(12)
    parts = len(split_markdown(answer, MESSAGE_LIMIT))
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])

    def at_the_last_post(r: RecordedRequest) -> When | None:
        posting = r.method == "POST" and r.path == f"/channels/{thread}/messages"
        already = len(h.fake.channel_messages(thread))
        return "after" if posting and already == parts - 1 else None

    h.fake.kill_at = at_the_last_post
    await crash_and_recover(h, answer, lambda: h.fake.dispatch("MESSAGE_CREATE", asked))
    assert_shown_once(h.fake.channel_messages(thread), answer)


async def test_an_ask_killed_after_posting_its_later_parts_is_shown_once(
    harness: Harness,
) -> None:
    """`/ask`: the head is the interaction's response in the channel, edited through its token;
    the answer's parts are in the thread started from it (the first moved there from the head
    once a second followed). After the crash the token is another process's: the head is
    edited with the bot token, the parts in place."""
    h = harness
    answer = long_answer(12)
    h.fake.kill_at = the_end

    async def ask() -> None:
        await h.fake.wait_for(lambda: bool(h.fake.commands))  # synced at start-up
        slash = h.fake.slash_command(
            "ask", {"prompt": "tell me about rivers"}, channel_id=h.general
        )
        await h.fake.dispatch("INTERACTION_CREATE", slash)

    key = await crash_and_recover(h, answer, ask)
    thread = key.rsplit(":", 1)[-1]
    (head,) = h.fake.channel_messages(h.general)
    assert head["id"] == thread  # the thread was started from the response
    # The answer is in the thread, each part once; the head in the channel says so.
    assert head["content"].startswith("✅ Answered in") and f"<#{thread}>" in head["content"]
    assert custom_ids(head) == []
    assert_shown_once(h.fake.channel_messages(thread), answer)
