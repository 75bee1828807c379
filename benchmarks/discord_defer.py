"""How fast a `/ask` is acknowledged: gateway dispatch to the defer callback.

Discord drops an interaction that is not answered or deferred within 3 s. This pushes N
(default 200) `/ask` interactions through the fake Discord's gateway to the real discord.py bot
(`TeammateBot`), with the real runner, SQLite store and a scripted model answering each one,
and measures, per interaction, the time from the fake sending the `INTERACTION_CREATE` frame to
the bot's `POST /interactions/{id}/{token}/callback` arriving. Two loads: `paced` (one every
`--gap-ms`, while earlier answers are still being written) and `burst` (all at once).

Run: `uv run python -m benchmarks.discord_defer` or `uv run python benchmarks/discord_defer.py`
[--count 200] [--gap-ms 5]. Prints the conditions, a table, and last one JSON line with
`defer_p50_ms` and `defer_p99_ms` (paced) and the burst's `burst_defer_p50_ms`,
`burst_defer_p99_ms`. Target: p99 under 150 ms. A measurement, not a test.
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
from typing import Any

import discord

from bots.discord.bot import DISCORD_RULES, TeammateBot
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord, point_discord_py_at


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


async def measure(count: int, gap_ms: float) -> dict[str, Any]:
    logging.getLogger("discord").setLevel(logging.ERROR)
    fake = FakeDiscord()
    await fake.start()
    restore = point_discord_py_at(fake)
    guild_id = next(iter(fake.guilds))
    channel = fake.add_channel(guild_id, name="general")["id"]
    with tempfile.TemporaryDirectory() as directory:
        store = await SqliteStore.open(Path(directory) / "teammate.db")
        model = ScriptedModel(default=Reply(text="An answer of a few words."), record=False)
        settings = Settings(
            data_dir=Path(directory), discord=DiscordSettings(dev_guild_id=guild_id)
        )
        runner = ConversationRunner(
            store=store,
            settings=settings,
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: [],
            platform_rules=DISCORD_RULES,
        )
        bot = TeammateBot(runner, settings, guild_ready_timeout=0.05)
        task = asyncio.create_task(bot.start(BOT_TOKEN))
        ready = asyncio.create_task(bot.wait_until_ready())  # after start has set up the bot
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        try:
            paced = await push(fake, channel, count, gap_ms / 1000)
            await runner.wait_all()
            burst = await push(fake, channel, count, 0.0)
            await runner.wait_all()
        finally:
            await bot.close()
            await asyncio.gather(task, return_exceptions=True)
            await runner.close()
            await store.close()
            restore()
            await fake.close()
    return {"paced": paced, "burst": burst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, discord.py {discord.__version__}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
    print(
        f"{args.count} /ask interactions per load through the fake gateway (zlib-stream), "
        "real runner and SQLite store, scripted model answering each"
    )
    print()
    results = asyncio.run(measure(args.count, args.gap_ms))
    print(f"{'load':<28} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    figures: dict[str, Any] = {"count": args.count}
    for name, values in results.items():
        label = f"paced ({args.gap_ms:g} ms apart)" if name == "paced" else "burst (all at once)"
        p50 = statistics.median(values)
        p99 = percentile(values, 0.99)
        print(f"{label:<28} {p50:>8.1f} {p99:>8.1f} {max(values):>8.1f}")
        prefix = "" if name == "paced" else "burst_"
        figures[f"{prefix}defer_p50_ms"] = round(p50, 2)
        figures[f"{prefix}defer_p99_ms"] = round(p99, 2)
    print()
    print("target: p99 under 150 ms (Discord's limit is 3 s)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
