"""How fast the SQLite store appends and loads, at realistic message sizes.

Run: `uv run python -m benchmarks.storage_bench` or `uv run python benchmarks/storage_bench.py`
(not named `storage.py`: that would shadow the package it measures). Prints the conditions, a
table, and last one JSON line with `append_ms_at_10`, `append_ms_at_10000`, `load_ms_10000`,
`appends_per_s_200_concurrent`, `accept_deliver_ms` (a user message through the inbox),
`open_ms` and `db_mb` (opening runs a quick integrity check of the whole file). Targets:
append at 10,000 within 1.5x of append at 10; loading 10,000 messages under 150 ms. A
measurement, not a test: CI does not run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/storage_bench.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time

from core.messages import (
    AssistantMessage,
    Author,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    dump_message,
)
from storage.sqlite import SqliteStore

# The stores measured, side by side when several (same run, alternating rounds). The
# database-thread store this one replaced was measured against it this way (see the git log).
STORES: dict[str, type[SqliteStore]] = {"sqlite": SqliteStore}
# Higher is better for these figures; lower for every other.
HIGHER_IS_BETTER = {"appends_per_s_200_concurrent"}

BIG = 10_000
SAMPLES = 200
CONCURRENT_CONVERSATIONS = 200
CONCURRENT_APPENDS_EACH = 25
_PROSE = (
    "deploy the staging branch and check why the migration test fails on CI again because "
    "the fixture path changed last week please read config yaml and compare with main"
)
_WORDS = _PROSE.split()


def realistic_message(i: int, rng: random.Random) -> Message:
    """A thread's rhythm: a person asks, the model calls a tool, the tool answers."""

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    match i % 3:
        case 0:
            return UserMessage(
                content=words(rng.randint(10, 80)),
                author=Author(id=f"U0{rng.randint(1, 9)}ABCDEF", name="Ada Lovelace"),
                platform_message_id=f"1700000{i:06d}.000100",
            )
        case 1:
            return AssistantMessage(
                content=[
                    Text(text=words(rng.randint(5, 40))),
                    ToolCall(
                        id=f"toolu_01{i:020d}",
                        name="read",
                        arguments={"path": f"src/app/module_{i % 50}.py", "offset": 1},
                    ),
                ],
                model="claude-sonnet-4-6",
                provider="anthropic",
                usage=Usage(input=1200, output=85, cache_read=15000, cost=0.0071),
                stop_reason="tool_use",
            )
        case _:
            return ToolResultMessage(
                tool_call_id=f"toolu_01{i - 1:020d}",
                tool_name="read",
                content=[Text(text=words(rng.randint(30, 120)))],
                details={"lines": rng.randint(10, 400), "truncated": False},
            )


async def run(directory: str, store_class: type[SqliteStore]) -> dict[str, float]:
    rng = random.Random(7)
    messages = [realistic_message(i, rng) for i in range(BIG + SAMPLES)]
    sizes = [len(dump_message(m)) for m in messages]

    async with store_class.open(Path(directory) / "bench.db") as store:
        big = await store.get_or_create_conversation("bench:big", channel_key="bench")
        for message in messages[: BIG - SAMPLES]:
            await store.append_message(big.id, message)
        small_ids = []
        for n in range(SAMPLES):
            small = await store.get_or_create_conversation(f"bench:small:{n}", channel_key="b")
            for message in messages[:9]:
                await store.append_message(small.id, message)
            small_ids.append(small.id)

        # Interleaved, so both sizes see the same file, cache and machine state.
        at_10: list[float] = []
        at_big: list[float] = []
        for n in range(SAMPLES):
            start = time.perf_counter()
            await store.append_message(small_ids[n], messages[9])
            at_10.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            stored = await store.append_message(big.id, messages[BIG - SAMPLES + n])
            at_big.append((time.perf_counter() - start) * 1000)
        assert stored.seq == BIG

        loads: list[float] = []
        for _ in range(10):
            start = time.perf_counter()
            loaded = await store.load(big.id)
            loads.append((time.perf_counter() - start) * 1000)
            assert len(loaded.messages) == BIG

        # The inbox path of a user message: accepted (claim + inbox), then delivered.
        inbox: list[float] = []
        for n in range(SAMPLES):
            start = time.perf_counter()
            accepted = await store.accept_delivery(
                f"bench:small:{n}", messages[0], channel_key="b", delivery_id=f"ev{n}"
            )
            assert accepted is not None
            await store.deliver(accepted.conversation.id, [accepted.item.id])
            inbox.append((time.perf_counter() - start) * 1000)

        async def converse(n: int) -> None:
            conversation = await store.get_or_create_conversation(
                f"bench:concurrent:{n}", channel_key="c"
            )
            for i in range(CONCURRENT_APPENDS_EACH):
                await store.append_message(conversation.id, messages[i])

        start = time.perf_counter()
        await asyncio.gather(*(converse(n) for n in range(CONCURRENT_CONVERSATIONS)))
        concurrent_s = time.perf_counter() - start
        total = CONCURRENT_CONVERSATIONS * CONCURRENT_APPENDS_EACH

    # Opening runs `PRAGMA quick_check`, which reads the whole file: its cost grows with it.
    path = Path(directory) / "bench.db"
    opens: list[float] = []
    for _ in range(5):
        start = time.perf_counter()
        reopened = await store_class.open(path)
        opens.append((time.perf_counter() - start) * 1000)
        await reopened.close()
    db_mb = path.stat().st_size / 1e6

    def p95(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.95) - 1]

    rows = [
        ("append, conversation at 10", statistics.median(at_10), p95(at_10), len(at_10)),
        ("append, conversation at 10,000", statistics.median(at_big), p95(at_big), len(at_big)),
        ("load 10,000 messages", statistics.median(loads), p95(loads), len(loads)),
        ("accept + deliver a user message", statistics.median(inbox), p95(inbox), len(inbox)),
        (f"open a {db_mb:.0f} MB file (quick_check)", statistics.median(opens), max(opens), 5),
    ]
    print(f"messages: median {statistics.median(sizes):.0f} B, max {max(sizes)} B as JSON")
    print()
    print(f"{'measure':<34}{'median ms':>11}{'p95 ms':>10}{'n':>6}")
    for name, median, high, n in rows:
        print(f"{name:<34}{median:>11.3f}{high:>10.3f}{n:>6}")
    print(
        f"{'200 conversations appending':<34}{total / concurrent_s:>11.0f} appends/s "
        f"({total} appends in {concurrent_s:.2f} s)"
    )
    ratio = statistics.median(at_big) / statistics.median(at_10)
    print(f"append at 10,000 / at 10: {ratio:.2f}x (target <= 1.5x)")
    print(f"load 10,000: {statistics.median(loads):.1f} ms (target < 150 ms)")
    return {
        "append_ms_at_10": round(statistics.median(at_10), 4),
        "append_ms_at_10000": round(statistics.median(at_big), 4),
        "load_ms_10000": round(statistics.median(loads), 2),
        "appends_per_s_200_concurrent": round(total / concurrent_s, 1),
        "accept_deliver_ms": round(statistics.median(inbox), 4),
        "open_ms": round(statistics.median(opens), 2),
        "db_mb": round(db_mb, 1),
    }


def compare(results: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """Each figure's median over the rounds, per store, and the ratio of the first store's
    to each other's (above 1: the other is better, whichever way the figure points)."""
    names = list(results)
    medians = {
        name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for name, rounds in results.items()
    }
    base = names[0]
    print()
    header = f"{'figure (median of rounds)':<30}" + "".join(f"{n:>14}" for n in names)
    print(header + "".join(f"{'gain ' + n:>16}" for n in names[1:]))
    out: dict[str, float] = {}
    for key in medians[base]:
        line = f"{key:<30}" + "".join(f"{medians[n][key]:>14.3f}" for n in names)
        for other in names[1:]:
            a, b = medians[base][key], medians[other][key]
            gain = (b / a if key in HIGHER_IS_BETTER else a / b) if a and b else float("nan")
            line += f"{gain:>15.2f}x"
            out[f"{key}_gain_{other}"] = round(gain, 3)
        print(line)
        for n in names:
            out[f"{key}_{n}"] = round(medians[n][key], 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", nargs="+", choices=sorted(STORES), default=list(STORES))
    parser.add_argument("--rounds", type=int, default=1, help="each store, alternating")
    args = parser.parse_args()
    print(f"python {platform.python_version()} ({platform.python_implementation()})")
    print(f"sqlite {sqlite3.sqlite_version}; stores: {', '.join(args.stores)}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
    print("pragmas: journal_mode=WAL, synchronous=NORMAL, foreign_keys=ON")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in args.stores}
    for round_ in range(args.rounds):
        for name in args.stores:
            with tempfile.TemporaryDirectory(prefix="teammate-bench-") as directory:
                print(f"\n== {name} (round {round_ + 1}/{args.rounds}, {directory})")
                results[name].append(asyncio.run(run(directory, STORES[name])))
    figures = compare(results) if len(args.stores) > 1 else results[args.stores[0]][-1]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
