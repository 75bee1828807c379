"""N conversations at once through the real runner and SQLite store.

Each conversation gets one message; the scripted model takes 1 s per reply (an asyncio sleep, so
replies overlap as real network calls do). Everything else is real: delivery de-duplication,
the user message committed first, run records, persisted replies, usage ledger, surfaces.

Figures per N: wall time from the first submit to the last run recorded, its ratio to the
model's 1 s, the runner's own cost per turn (wall time of the same N conversations with a
zero-latency model, divided by N), and peak resident memory of the process.

Run: uv run python benchmarks/concurrency.py [--sizes 100 1000] [--latency 1.0]
Prints a table, then one JSON line. Target at N = 1,000: wall < 1.3 s, peak memory < 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.surface import SurfaceEvent
from core.messages import Author
from core.models.scripted import Reply, ScriptedModel
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


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--latency", type=float, default=1.0)
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
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
