"""N conversations at once through the real runner and SQLite store.

Each conversation gets one message; the scripted model takes 1 s per reply (an asyncio sleep, so
replies overlap as real network calls do). Everything else is real: delivery de-duplication,
the user message committed first, run records, persisted replies, usage ledger, surfaces.

Figures per N: wall time from the first submit to the last run recorded, its ratio to the
model's 1 s, the runner's own cost per turn (wall time of the same N conversations with a
zero-latency model, divided by N), and peak resident memory of the process.

The steering-heavy case (issue 8): STEER_N conversations, each receiving 3 messages 50-300 ms
apart while a 1 s model reply with one tool call runs (the later two are steered into the run,
delivered after the tool, and answered by a second 1 s reply). Reported: wall time, the
runner's overhead per model call (the same traffic with a zero-latency model and no gaps, wall
divided by model calls), messages answered / sent, duplicates (a message sent twice in one
request, or stored twice), and replay mismatches (the stored conversation, replayed as the next
run would send it, differs from what the model was last sent plus its reply).

Run: uv run python benchmarks/concurrency.py [--sizes 100 1000] [--latency 1.0] [--steer 1000]
Prints two tables, then one JSON line. Targets at N = 1,000: wall < 1.3 s, peak memory < 300 MB;
steering: all answered, no duplicates, no mismatches, overhead < 0.5 ms per model call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.surface import SurfaceEvent
from core.history import repair_history
from core.messages import AssistantMessage, Author, Message, ToolResultMessage, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore


class CountingSurface:
    """A surface that only counts what it is shown (rendering cost is the adapters')."""

    def __init__(self) -> None:
        self.events = 0

    @property
    def ref(self) -> dict[str, Any]:
        return {"surface": "bench"}

    async def emit(self, event: SurfaceEvent) -> None:
        self.events += 1

    async def close(self) -> None:
        return None


async def run_wave(size: int, latency_s: float, data_dir: Path) -> float:
    """Wall seconds for `size` conversations answered once each."""
    store = await SqliteStore.open(data_dir / "teammate.db")
    model = ScriptedModel(
        default=Reply(text="an answer of a few words", latency_s=latency_s), record=False
    )
    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=data_dir),
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [],
        platform_rules="Plain text.",
    )
    author = Author(id="U1", name="Ada")
    stamp = time.time()
    started = time.perf_counter()
    await asyncio.gather(
        *(
            runner.submit(
                Incoming(
                    conversation_key=f"bench:{data_dir.name}:{i}",
                    channel_key=f"bench:{i % 50}",
                    author=author,
                    text=f"question {i}",
                    delivery_id=f"{data_dir.name}-{i}",
                    timestamp=stamp,
                ),
                CountingSurface(),
            )
            for i in range(size)
        )
    )
    await runner.wait_all()
    wall = time.perf_counter() - started
    runs = await store.usage_since(0)
    assert runs.output > 0
    await store.close()
    return wall


class NoParams(BaseModel):
    pass


class LookTool(AgentTool[NoParams]):
    """The one tool call of the steering case: instant, so the model's time dominates."""

    name = "look"
    label = "Look"
    description = "Look around."
    parameters = NoParams

    async def execute(self, call_id: str, params: NoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("looked")


def said(message: Message) -> str:
    return message.text().rsplit("\n", 1)[-1] if isinstance(message, UserMessage) else ""


async def run_steering_wave(
    size: int, latency_s: float, data_dir: Path, *, gaps: bool
) -> dict[str, float]:
    """`size` conversations of 3 messages each; checks every message against the model's
    requests and the stored history."""
    store = await SqliteStore.open(data_dir / "teammate.db")

    def reply(request: ModelRequest) -> Reply:
        if any(isinstance(m, ToolResultMessage) for m in request.messages):
            return Reply(text="answered all of you", latency_s=latency_s)
        return Reply(tool_calls=[call("look")], latency_s=latency_s)

    model = ScriptedModel(default=reply)
    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=data_dir),
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [LookTool()],
        platform_rules="Plain text.",
    )
    author = Author(id="U1", name="Ada")
    rng = random.Random(size)
    stamp = time.time()

    async def conversation(index: int) -> None:
        for message in range(3):
            if message and gaps:
                await asyncio.sleep(rng.uniform(0.05, 0.3))
            incoming = Incoming(
                conversation_key=f"steer:{data_dir.name}:{index}",
                channel_key=f"steer:{index % 50}",
                author=author,
                text=f"c{index} m{message}",
                delivery_id=f"{data_dir.name}-{index}-{message}",
                timestamp=stamp,
            )
            await runner.submit(incoming, CountingSurface())

    started = time.perf_counter()
    await asyncio.gather(*(conversation(i) for i in range(size)))
    await runner.wait_all()
    wall = time.perf_counter() - started

    last_request: dict[str, ModelRequest] = {}
    duplicates = 0
    for request in model.requests:
        lines = [said(m) for m in request.messages if isinstance(m, UserMessage)]
        duplicates += len(lines) - len(set(lines))
        last_request[lines[0].split()[0]] = request
    answered = mismatches = 0
    for index in range(size):
        conv = await store.get_conversation(f"steer:{data_dir.name}:{index}")
        assert conv is not None
        stored = [s.message for s in (await store.load(conv.id)).messages]
        lines = [said(m) for m in stored if isinstance(m, UserMessage)]
        duplicates += len(lines) - len(set(lines))
        last_reply = max(
            (i for i, m in enumerate(stored) if isinstance(m, AssistantMessage)), default=-1
        )
        answered += sum(
            1
            for i, m in enumerate(stored)
            if isinstance(m, UserMessage) and i < last_reply and stored[last_reply].text()
        )
        seen = last_request.get(f"c{index}")
        replay = [m.model_dump() for m in repair_history(stored)]
        sent = [m.model_dump() for m in seen.messages] if seen else []
        if seen is None or replay != [*sent, stored[-1].model_dump()]:
            mismatches += 1
    await store.close()
    return {
        "wall": wall,
        "sent": size * 3,
        "answered": answered,
        "duplicates": duplicates,
        "mismatches": mismatches,
        "model_calls": len(model.requests),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--steer", type=int, default=1000, help="conversations; 0 to skip")
    args = parser.parse_args()
    print(
        f"conditions: python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, model latency {args.latency:g} s, one message per "
        "conversation, real runner + SQLite store (WAL) in a temp dir"
    )
    figures: dict[str, float] = {}
    print(f"{'N':>6} {'wall s':>8} {'ratio':>7} {'overhead ms/turn':>17} {'peak MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            base = Path(tmp) / f"n{size}"
            (base / "warm").mkdir(parents=True)
            (base / "zero").mkdir()
            (base / "real").mkdir()
            await run_wave(10, 0.0, base / "warm")
            zero = await run_wave(size, 0.0, base / "zero")
            wall = await run_wave(size, args.latency, base / "real")
            overhead = zero / size * 1000
            peak = peak_rss_mb()
            figures.update(
                {
                    f"wall_s_{size}": round(wall, 3),
                    f"ratio_{size}": round(wall / args.latency, 3),
                    f"overhead_ms_per_turn_{size}": round(overhead, 3),
                    f"peak_mb_{size}": round(peak, 1),
                }
            )
            print(
                f"{size:>6} {wall:>8.3f} {wall / args.latency:>7.3f} {overhead:>17.3f} {peak:>8.1f}"
            )
        if args.steer:
            figures.update(await steering_case(args.steer, args.latency, Path(tmp) / "steer"))
    print(json.dumps(figures))


async def steering_case(size: int, latency_s: float, base: Path) -> dict[str, float]:
    for name in ("warm", "zero", "real"):
        (base / name).mkdir(parents=True)
    print(
        f"\nsteering: {size} conversations x 3 messages 50-300 ms apart, model replies of "
        f"{latency_s:g} s (the first with one tool call)"
    )
    await run_steering_wave(10, 0.0, base / "warm", gaps=False)
    zero = await run_steering_wave(size, 0.0, base / "zero", gaps=False)
    real = await run_steering_wave(size, latency_s, base / "real", gaps=True)
    overhead = zero["wall"] / zero["model_calls"] * 1000
    print(
        f"{'N':>6} {'wall s':>8} {'overhead ms/turn':>17} {'answered/sent':>14} "
        f"{'duplicates':>10} {'replay mismatches':>18}"
    )
    answered = f"{real['answered']:.0f}/{real['sent']:.0f}"
    print(
        f"{size:>6} {real['wall']:>8.3f} {overhead:>17.3f} {answered:>14} "
        f"{real['duplicates'] + zero['duplicates']:>10.0f} "
        f"{real['mismatches'] + zero['mismatches']:>18.0f}"
    )
    return {
        "steer_sent": real["sent"],
        "steer_answered": real["answered"],
        "steer_duplicates": real["duplicates"] + zero["duplicates"],
        "steer_replay_mismatches": real["mismatches"] + zero["mismatches"],
        "steer_overhead_ms_per_turn": round(overhead, 3),
        "steer_wall_s": round(real["wall"], 3),
    }


if __name__ == "__main__":
    asyncio.run(main())
