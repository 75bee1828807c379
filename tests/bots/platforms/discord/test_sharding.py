"""`[discord] shard_count` / `shard_ids` reach discord.py: one shard per instance (a plain
client identifying as that shard, checked at the fake gateway) or several in one process (an
auto-sharded bot), and inconsistent settings are refused in one line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord.ext import commands
from pydantic import ValidationError

from bots.platforms.discord.bot import ShardedTeammateBot, TeammateBot, create_bot
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings, SettingsError
from core.models.scripted import ScriptedModel
from storage.sqlite import SqliteStore
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord

LIMIT_S = 30.0  # a hang guard


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[ConversationRunner]:
    async with SqliteStore.open(tmp_path / "teammate.db") as store:
        model = ScriptedModel()
        made = ConversationRunner(
            store=store,
            settings=Settings(data_dir=tmp_path),
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: [],
            platform_rules="Plain text.",
        )
        yield made
        await made.close()


def settings_with(tmp_path: Path, **discord: Any) -> Settings:
    return Settings(data_dir=tmp_path, discord=DiscordSettings(**discord))


async def test_unset_one_connection_for_every_guild(
    runner: ConversationRunner, tmp_path: Path
) -> None:
    bot = create_bot(runner, settings_with(tmp_path))
    assert type(bot) is TeammateBot
    assert (bot.shard_id, bot.shard_count) == (None, None)


async def test_one_shard_per_instance_identifies_as_that_shard(
    runner: ConversationRunner, tmp_path: Path, fake_discord: FakeDiscord
) -> None:
    guild_id = next(iter(fake_discord.guilds))
    settings = settings_with(tmp_path, shard_count=3, shard_ids=[1], dev_guild_id=guild_id)
    bot = create_bot(runner, settings, guild_ready_timeout=0.05)
    assert type(bot) is TeammateBot
    task = asyncio.create_task(bot.start(BOT_TOKEN))
    try:
        await asyncio.wait_for(bot.wait_until_ready(), LIMIT_S)
        assert [identify.get("shard") for identify in fake_discord.identifies] == [[1, 3]]
    finally:
        await bot.close()
        await asyncio.wait_for(task, LIMIT_S)


async def test_several_shards_in_one_process_use_the_auto_sharded_bot(
    runner: ConversationRunner, tmp_path: Path
) -> None:
    bot = create_bot(runner, settings_with(tmp_path, shard_count=4, shard_ids=[0, 2]))
    assert isinstance(bot, ShardedTeammateBot)
    assert isinstance(bot, commands.AutoShardedBot)
    assert (bot.shard_ids, bot.shard_count) == ([0, 2], 4)

    every = create_bot(runner, settings_with(tmp_path, shard_count=2))
    assert isinstance(every, ShardedTeammateBot)
    assert (every.shard_ids, every.shard_count) == (None, 2)  # all of them, here


def test_a_plain_bot_refuses_several_shards(runner: ConversationRunner, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="shard_ids"):
        TeammateBot(runner, settings_with(tmp_path, shard_count=4, shard_ids=[0, 2]))


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"shard_ids": [0]}, "needs shard_count"),
        ({"shard_count": 2, "shard_ids": [2]}, "not in 0..1"),
        ({"shard_count": 2, "shard_ids": [1, 1]}, "twice"),
        ({"shard_count": 0}, "greater than or equal to 1"),
    ],
)
def test_inconsistent_shard_settings_are_refused(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        DiscordSettings(**fields)


def test_shard_settings_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMMATE_DISCORD__SHARD_COUNT", "3")
    monkeypatch.setenv("TEAMMATE_DISCORD__SHARD_IDS", "[2]")
    settings = Settings(data_dir=tmp_path)
    assert (settings.discord.shard_count, settings.discord.shard_ids) == (3, [2])
