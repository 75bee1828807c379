"""Prompt-cache efficiency and thinking validity of real conversations, as Anthropic would see them.

The real runner and the real `AnthropicModel` (through the `anthropic` SDK) answer a scripted
workload against the fake Messages API, whose replies carry signed thinking bound to its prefix
as the 5.5 models' are. Three channels, several threads each, every turn a tool call and an
answer; meanwhile the ordinary changes a team makes: notes remembered (channel memory), the
channel's instructions changed by an admin, and (the one change that cannot be appended) the
channel's tools narrowed.

From what the fake received it then simulates Anthropic's prompt cache: each request's prefix
(tools, system, messages) is cut into blocks; a breakpoint (`cache_control`) writes the prefix
up to it; a later request reads the longest prefix ending where an earlier request wrote one.
Tokens are estimated as characters / 4 of each block's JSON.

Reported, per kind of thread (stable, memory changed, instructions changed, tools changed), over
every request after a thread's first:
- efficiency (reuse): tokens read from cache / tokens of the longest prefix some earlier request
  had already sent (what a perfect cache could have served): 100 % means no change to what was
  sent ever cost a cache write;
- read share: tokens read / (read + written); what is new in each request (the reply, the tool
  result, the next question) is written once, so short threads stay below 100 % by nature;
- the requests that asked for `drop_block` (the guard), and the requests the API refused (must
  be 0: a refused request is a conversation that stopped working).

Run: uv run python -m benchmarks.prompt_cache [--threads 3] [--turns 6]
Prints the conditions, a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bots.app import ModelFactory
from bots.features.channel_tools import channel_tools_factory
from bots.features.memory import ChannelMemory
from bots.runner import ConversationRunner
from bots.settings import ChannelConfig, Settings
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import incoming
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    TextOut,
    ThinkingOut,
    ToolUseOut,
    bare,
    sse,
)
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tools.files import LsTool, ReadTool

KINDS = ("stable", "memory", "instructions", "tools")
API_KEY = "sk-ant-bench-prompt-cache"


def tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, sort_keys=True)) // 4)


def blocks_of(body: dict[str, Any]) -> list[tuple[Any, bool]]:
    """The request's prefix as (block, is a breakpoint), in the cache's order."""
    out: list[tuple[Any, bool]] = []
    out += [(bare(tool), "cache_control" in tool) for tool in body.get("tools", [])]
    out += [(bare(block), "cache_control" in block) for block in body.get("system", [])]
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for position, block in enumerate(content):
            # A message boundary is part of the prefix: the role is hashed with its first block.
            marked = (
                {"role": message["role"], "block": bare(block)} if position == 0 else bare(block)
            )
            out.append((marked, "cache_control" in block))
    return out


class CacheSimulation:
    """Anthropic's prefix cache, reduced to what decides hits: prefixes written at breakpoints."""

    def __init__(self) -> None:
        self.written: set[str] = set()
        self.seen: set[str] = set()  # every prefix any earlier request sent

    def request(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(tokens read, tokens written, tokens of the longest prefix an earlier request had
        already sent: what a perfect cache could have served) for one request."""
        running = hashlib.sha256()
        digests: list[str] = []
        sizes: list[int] = []
        breakpoints: list[int] = []
        for index, (block, is_breakpoint) in enumerate(blocks_of(body)):
            running.update(json.dumps(block, sort_keys=True).encode())
            digests.append(running.copy().hexdigest())
            sizes.append(tokens(block))
            if is_breakpoint:
                breakpoints.append(index)
        shared_to = max((i for i, d in enumerate(digests) if d in self.seen), default=-1)
        self.seen.update(digests)
        if not breakpoints:
            return 0, 0, sum(sizes[: shared_to + 1])
        last = breakpoints[-1]
        read_to = max((i for i in range(last + 1) if digests[i] in self.written), default=-1)
        read = sum(sizes[: read_to + 1])
        written = sum(sizes[read_to + 1 : last + 1])
        self.written.update(digests[i] for i in breakpoints)
        return read, written, sum(sizes[: shared_to + 1])


def turn_replies(thread: str, turn: int) -> list[Any]:
    return [
        sse(
            ThinkingOut(f"Look around for {thread} turn {turn}.", f"sig-{thread}-{turn}-a"),
            ToolUseOut(f"toolu_{thread}_{turn}", "ls", ["{}"]),
            stop_reason="tool_use",
        ),
        sse(
            ThinkingOut(f"Answer {thread} turn {turn}.", f"sig-{thread}-{turn}-b"),
            TextOut(f"Here is what I found for turn {turn} of {thread}. " * 8),
        ),
    ]


async def run(threads: int, turns: int, data: Path) -> dict[str, Any]:
    fake = FakeAnthropic(api_key=API_KEY)
    await fake.start()
    owners: list[tuple[str, int]] = []  # (kind, turn) of each request, in order
    failed: dict[str, int] = dict.fromkeys(KINDS, 0)  # answers that ended in an error
    try:
        settings = Settings(
            data_dir=data,
            anthropic_api_key=API_KEY,
            anthropic_base_url=fake.url,
            system_prompt="We are the platform team. " * 40,  # a realistic deployment prompt
        )
        models = ModelFactory(settings)
        async with SqliteStore.open(data / "teammate.db") as store:
            memory = ChannelMemory(store, settings.memory)
            tools_by_channel: dict[str, list[Any]] = {}

            def toolset(channel: str) -> list[Any]:
                return tools_by_channel.get(channel, [ReadTool(), LsTool()])

            runner = ConversationRunner(
                store=store,
                settings=settings,
                model_factory=models,
                toolset_factory=toolset,
                platform_rules="Plain text only.",
                surfaces=RecordingSurfaces(),
                channel_tools=channel_tools_factory(settings, memory),
            )
            for kind in KINDS:
                channel = f"slack:T1:{kind}"
                for thread in range(threads):
                    key = f"{channel}:{thread}.0"
                    for turn in range(turns):
                        if turn == turns // 2:  # the change, mid-thread
                            if kind == "memory":
                                await memory.add(
                                    channel, f"Fact {thread}: deploys on Tuesdays.", by="U1"
                                )
                            elif kind == "instructions":
                                config = ChannelConfig(system_prompt=f"Be brief ({thread}).")
                                await store.set_channel_config(channel, config.to_stored(), by="U1")
                            elif kind == "tools":  # narrowed, as a stored config would
                                tools_by_channel[channel] = [LsTool()]
                        fake.add(*turn_replies(f"{kind}{thread}", turn))
                        first = len(fake.requests)
                        surface = RecordingSurface()
                        message = incoming(
                            f"question {turn}", key=key, channel=channel, delivery=f"{key}:{turn}"
                        )
                        await runner.submit(message, surface)
                        await runner.wait(key)
                        owners += [(kind, turn)] * (len(fake.requests) - first)
                        if any(end.outcome != "done" for end in surface.finished()):
                            failed[kind] += 1
                            fake.clear_replies()
            await runner.close()
        await models.aclose()
    finally:
        await fake.close()

    simulation = CacheSimulation()
    figures: dict[str, dict[str, float]] = {
        kind: {
            "read": 0,
            "written": 0,
            "shared": 0,
            "requests": 0,
            "guarded": 0,
            "failed": failed[kind],
        }
        for kind in KINDS
    }
    for (kind, turn), recorded in zip(owners, fake.requests, strict=True):
        read, written, shared = simulation.request(recorded.body)
        row = figures[kind]
        row["requests"] += 1
        row["guarded"] += "anthropic-beta" in recorded.headers
        if turn > 0:
            row["read"] += read
            row["written"] += written
            row["shared"] += shared
    return {"figures": figures, "dropped": fake.dropped_thinking}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    print(
        f"conditions: python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}, {args.threads} threads x {args.turns} turns per kind, "
        "claude-sonnet-5-5 (preserved thinking) on the fake Messages API"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as data:
        result = await run(args.threads, args.turns, Path(data))
    print(
        f"{'thread kind':>14} {'requests':>9} {'efficiency':>11} {'read share':>11} "
        f"{'drop_block':>11} {'failed':>7}"
    )
    out: dict[str, Any] = {}
    total_read = total_written = 0.0
    for kind, row in result["figures"].items():
        share = row["read"] / max(1.0, row["read"] + row["written"])
        reuse = row["read"] / max(1.0, row["shared"])
        total_read += row["read"]
        total_written += row["written"]
        print(
            f"{kind:>14} {int(row['requests']):>9} {reuse:>10.2%} {share:>10.2%} "
            f"{int(row['guarded']):>11} {int(row['failed']):>7}"
        )
        out[f"read_share_{kind}"] = round(share, 4)
        out[f"efficiency_{kind}"] = round(reuse, 4)
        out[f"guarded_{kind}"] = int(row["guarded"])
        out[f"failed_{kind}"] = int(row["failed"])
    out["read_share_all"] = round(total_read / max(1.0, total_read + total_written), 4)
    out["thinking_blocks_dropped"] = result["dropped"]
    out["seconds"] = round(time.perf_counter() - started, 2)
    print(f"thinking blocks the API dropped: {result['dropped']}")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
