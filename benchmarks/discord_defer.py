"""How fast a `/ask` is acknowledged: gateway dispatch to the defer callback.

Discord drops an interaction that is not answered or deferred within 3 s. This pushes N
(default 200) `/ask` interactions through the fake Discord's gateway to the real discord.py bot
(`TeammateBot`), with the real runner, SQLite store and a scripted model answering each one,
and measures, per interaction, the time from the fake sending the `INTERACTION_CREATE` frame to
the bot's `POST /interactions/{id}/{token}/callback` arriving. Two loads: `paced` (one every
`--gap-ms`, while earlier answers are still being written) and `burst` (all at once).

The fake runs in its own process (as Discord is elsewhere), so its work is not in the bot's
timing; beside Teammate, a bare discord.py bot whose `/ask` only defers gives the floor that
discord.py and the fake impose, and the ratio says what is Teammate's own cost.
`--same-process` runs the fake on the bot's event loop instead (the old set-up: the fake's work
then competes with the bot's).

Run: `uv run python -m benchmarks.discord_defer` or `uv run python benchmarks/discord_defer.py`
[--count 200] [--gap-ms 5] [--same-process]. Prints the conditions, a table, and last one JSON
line with `defer_p50_ms` and `defer_p99_ms` (paced) and the burst's `burst_defer_p50_ms`,
`burst_defer_p99_ms`, and the bare bot's `bare_*` figures. Target: p99 under 150 ms.
A measurement, not a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/discord_defer.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from types import SimpleNamespace
from typing import Any, cast

import discord
from discord.ext import commands

from bots.platforms.discord.bot import DISCORD_RULES, TeammateBot
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord, point_discord_py_at

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parent.parent


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


async def push(fake: FakeDiscord, channel: str, count: int, gap_s: float) -> list[float]:
    """Dispatch `count` /ask interactions `gap_s` apart; each one's dispatch-to-defer in ms."""
    sent: dict[str, float] = {}
    for index in range(count):
        payload = fake.slash_command("ask", {"prompt": f"question {index}"}, channel_id=channel)
        sent[payload["id"]] = time.perf_counter()
        await fake.dispatch("INTERACTION_CREATE", payload)
        if gap_s:
            await asyncio.sleep(gap_s)

    def callbacks() -> dict[str, float]:
        found: dict[str, float] = {}
        for request in fake.requests:
            parts = request.path.split("/")
            if request.method == "POST" and len(parts) == 5 and parts[1] == "interactions":
                found.setdefault(parts[2], request.received_at)
        return found

    await fake.wait_for(lambda: set(sent) <= set(callbacks()), timeout_s=120)
    done = callbacks()
    return [(done[key] - started) * 1000 for key, started in sent.items()]


async def start_bot(bot: Any) -> asyncio.Task[None]:
    task: asyncio.Task[None] = asyncio.create_task(bot.start(BOT_TOKEN))
    ready = asyncio.create_task(bot.wait_until_ready())  # after start has set up the bot
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    return task


def bare_bot(guild_id: str) -> commands.Bot:
    """discord.py alone: `/ask` defers and does nothing else (the floor)."""

    class Bare(commands.Bot):
        async def setup_hook(self) -> None:
            guild = discord.Object(id=int(guild_id))
            self.tree.copy_global_to(guild=guild)
            await self.tree.sync(guild=guild)

    bot = Bare(command_prefix="!", intents=discord.Intents.default(), guild_ready_timeout=0.05)

    @bot.tree.command(name="ask", description="ask")
    async def ask(interaction: discord.Interaction[Any], prompt: str) -> None:
        await interaction.response.defer(thinking=True)

    return bot


class FakeHandle:
    """The fake Discord, in this process or in a child process; `push` runs a load on it."""

    def __init__(self) -> None:
        self.fake: FakeDiscord | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.api_base = self.gateway_url = self.guild = self.channel = ""

    async def start(self, same_process: bool) -> None:
        if same_process:
            self.fake = FakeDiscord()
            await self.fake.start()
            described = describe_fake(self.fake)
        else:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(THIS_FILE),
                "--serve-fake",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                cwd=str(ROOT),
            )
            described = json.loads(await self._line())
        self.api_base, self.gateway_url = described["api_base"], described["gateway_url"]
        self.guild, self.channel = described["guild"], described["channel"]

    async def _line(self) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise RuntimeError("the fake Discord's process ended")
        return line

    async def push(self, count: int, gap_s: float) -> list[float]:
        if self.fake is not None:
            return await push(self.fake, self.channel, count, gap_s)
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(f"push {count} {gap_s}\n".encode())
        await self.process.stdin.drain()
        values: list[float] = json.loads(await self._line())
        return values

    async def close(self) -> None:
        if self.fake is not None:
            await self.fake.close()
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            await self.process.wait()


def describe_fake(fake: FakeDiscord) -> dict[str, str]:
    guild_id = next(iter(fake.guilds))
    channel = fake.add_channel(guild_id, name="general")["id"]
    return {
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        "guild": guild_id,
        "channel": channel,
    }


async def serve_fake() -> None:
    """The child process: a fake Discord, driven by `push COUNT GAP_S` lines on stdin."""
    fake = FakeDiscord()
    await fake.start()
    print(json.dumps(describe_fake(fake)), flush=True)
    channel = next(c for c, v in fake.channels.items() if v.get("name") == "general")
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        _, count, gap_s = line.split()
        values = await push(fake, channel, int(count), float(gap_s))
        print(json.dumps(values), flush=True)
    await fake.close()


async def measure_bot(kind: str, count: int, gap_ms: float, same_process: bool) -> dict[str, Any]:
    handle = FakeHandle()
    await handle.start(same_process)
    restore = point_discord_py_at(
        cast(FakeDiscord, SimpleNamespace(api_base=handle.api_base, gateway_url=handle.gateway_url))
    )
    with tempfile.TemporaryDirectory() as directory:
        store = await SqliteStore.open(Path(directory) / "teammate.db")
        model = ScriptedModel(default=Reply(text="An answer of a few words."), record=False)
        settings = Settings(
            data_dir=Path(directory), discord=DiscordSettings(dev_guild_id=handle.guild)
        )
        runner = ConversationRunner(
            store=store,
            settings=settings,
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: [],
            platform_rules=DISCORD_RULES,
        )
        bot: commands.Bot = (
            TeammateBot(runner, settings, guild_ready_timeout=0.05)
            if kind == "teammate"
            else bare_bot(handle.guild)
        )
        task = await start_bot(bot)
        try:
            paced = await handle.push(count, gap_ms / 1000)
            await runner.wait_all()
            burst = await handle.push(count, 0.0)
            await runner.wait_all()
        finally:
            await bot.close()
            await asyncio.gather(task, return_exceptions=True)
            await runner.close()
            await store.close()
            restore()
            await handle.close()
    return {"paced": paced, "burst": burst}


async def measure(count: int, gap_ms: float, same_process: bool) -> dict[str, Any]:
    logging.getLogger("discord").setLevel(logging.ERROR)
    results: dict[str, Any] = {}
    for kind in ("teammate", "bare"):
        results[kind] = await measure_bot(kind, count, gap_ms, same_process)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        asyncio.run(serve_fake())
        return
    print(f"python {platform.python_version()}, discord.py {discord.__version__}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
    where = "on the bot's event loop" if args.same_process else "in its own process"
    print(
        f"{args.count} /ask interactions per load through the fake gateway (zlib-stream, {where}); "
        "Teammate: real runner and SQLite store, scripted model answering each; bare: a "
        "discord.py bot that only defers"
    )
    print()
    results = asyncio.run(measure(args.count, args.gap_ms, args.same_process))
    print(f"{'bot':<9} {'load':<24} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    figures: dict[str, Any] = {"count": args.count, "fake_process": not args.same_process}
    for kind, loads in results.items():
        for name, values in loads.items():
            label = f"paced ({args.gap_ms:g} ms apart)" if name == "paced" else "burst (at once)"
            p50 = statistics.median(values)
            p99 = percentile(values, 0.99)
            print(f"{kind:<9} {label:<24} {p50:>8.1f} {p99:>8.1f} {max(values):>8.1f}")
            prefix = ("" if kind == "teammate" else "bare_") + ("" if name == "paced" else "burst_")
            figures[f"{prefix}defer_p50_ms"] = round(p50, 2)
            figures[f"{prefix}defer_p99_ms"] = round(p99, 2)
    for name in ("", "burst_"):
        bare = figures[f"bare_{name}defer_p99_ms"]
        figures[f"{name}p99_ratio"] = (
            round(figures[f"{name}defer_p99_ms"] / bare, 2) if bare else None
        )
    print()
    print("target: p99 under 150 ms (Discord's limit is 3 s); ratio: Teammate p99 / bare p99")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
