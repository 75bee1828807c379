"""Issue 29 on Discord: on the 5.5 models a reply's progress text comes as thinking. The real
discord.py bot, runner and `AnthropicModel` (on FakeAnthropic) against the fake Discord: while
the tool runs, the thread shows that text above the tool's embed; then the final answer, once;
the final answer's own thinking never."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bots.platforms.discord.bot import DISCORD_RULES, TeammateBot
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings
from core.models.base import Model
from storage.sqlite import SqliteStore
from tests.bots.narration_script import (
    ANSWER,
    HIDDEN,
    NARRATION,
    anthropic_on_fake,
    script_deploy_log,
)
from tests.bots.platforms.discord.test_bot_e2e import Clock, GateTool
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord


@asynccontextmanager
async def teammate_bot(
    fake: FakeDiscord, data_dir: Path, model: Model, gate: GateTool
) -> AsyncIterator[ConversationRunner]:
    """Teammate on Discord as `teammate discord` runs it, logged in to the fake and ready."""
    guild_id = next(iter(fake.guilds))
    settings = Settings(data_dir=data_dir, discord=DiscordSettings(dev_guild_id=guild_id))
    store = await SqliteStore.open(data_dir / "teammate.db")
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _model_id: model,
        toolset_factory=lambda _channel: [gate],
        platform_rules=DISCORD_RULES,
    )
    bot = TeammateBot(
        runner, settings, edit_interval_s=0.05, clock=Clock(), guild_ready_timeout=0.05
    )
    task = asyncio.create_task(bot.start(BOT_TOKEN))
    ready = asyncio.create_task(bot.wait_until_ready())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()  # login failed: show why
    try:
        yield runner
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)
        await runner.close()
        await store.close()


async def test_thinking_narration_shows_above_the_running_tool_and_the_answer_once(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    guild_id = next(iter(fake_discord.guilds))
    general = fake_discord.add_channel(guild_id, name="general")["id"]
    gate = GateTool()
    async with anthropic_on_fake() as (anthropic, model):
        script_deploy_log(anthropic, "gate", ["{}"])
        async with teammate_bot(fake_discord, tmp_path, model, gate) as runner:
            asked = fake_discord.message_payload(
                general, "why did the deploy fail?", mention_bot=True
            )
            await fake_discord.dispatch("MESSAGE_CREATE", asked)
            thread = asked["id"]  # a thread started from a message has the message's id
            await gate.started.wait()
            # While the tool runs: the narration, then the tool's embed below it.
            await fake_discord.wait_for(
                lambda: (
                    any(e for m in fake_discord.channel_messages(thread) for e in m["embeds"])
                    and any(
                        m["content"] == NARRATION for m in fake_discord.channel_messages(thread)
                    )
                )
            )
            working = fake_discord.channel_messages(thread)
            narrated = next(i for i, m in enumerate(working) if m["content"] == NARRATION)
            tool = next(i for i, m in enumerate(working) if m["embeds"])
            assert narrated < tool
            gate.release.set()
            await fake_discord.wait_for(
                lambda: any(m["content"] == ANSWER for m in fake_discord.channel_messages(thread))
            )
            await runner.wait(f"discord:{guild_id}:{thread}")
        assert anthropic.remaining == 0

    shown = fake_discord.channel_messages(thread)
    contents = [m["content"] for m in shown if m["content"]]
    assert contents == [NARRATION, ANSWER], "the narration once, above; the answer once"
    assert shown[-1]["content"] == ANSWER
    assert "embeds" in shown[1] and shown[1]["embeds"], "the tool's embed between them"
    received = json.dumps([r.json for r in fake_discord.requests], ensure_ascii=False, default=str)
    assert HIDDEN not in received  # the final answer's thinking, never sent
    assert received.count(f'"{NARRATION}"') == 1  # one edit of the head, never posted again
