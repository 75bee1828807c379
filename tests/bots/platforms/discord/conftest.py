"""Fixtures for the Discord tests: a `FakeDiscord` per test, with discord.py aimed at it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import discord
import pytest
from discord.ext import commands

from bots.platforms.discord.buttons import DYNAMIC_ITEMS
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord, point_discord_py_at


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """A started fake; discord.py's process-global URLs point at it until teardown."""
    fake = FakeDiscord()
    await fake.start()
    restore = point_discord_py_at(fake)
    try:
        yield fake
    finally:
        restore()
        await fake.close()


@pytest.fixture
async def ready_bot(fake_discord: FakeDiscord) -> AsyncIterator[commands.Bot]:
    """A real discord.py bot logged in to the fake, ready, with one text channel `general`
    and Teammate's persistent buttons registered."""
    guild_id = next(iter(fake_discord.guilds))
    fake_discord.add_channel(guild_id, name="general")
    intents = discord.Intents.default()
    intents.message_content = True
    bot = commands.Bot(command_prefix="!", intents=intents, guild_ready_timeout=0.05)
    bot.add_dynamic_items(*DYNAMIC_ITEMS)
    task = asyncio.create_task(bot.start(BOT_TOKEN))
    ready = asyncio.create_task(bot.wait_until_ready())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()  # login failed: show why
    try:
        yield bot
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)
