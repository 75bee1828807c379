"""The console's Conversations, search, conversation and Feedback pages over a large database,
on SQLite and on PostgreSQL.

The same seed as `benchmarks/console.py` (100,000 messages, 10,000 runs with their usage and a
vote on one in ten, 50 channels, 2,000 conversations over 45 days), plus each run's trace (a
model call, a tool call with 2 KB of result, its answer: 30,000 trace rows); SQLite's search
index caught up once after seeding (as the trace recorder keeps it while Teammate runs). Then
the console is served in this process on 127.0.0.1 and each page requested `--requests` times,
signed in as an admin. Server time: from sending the request to the answer's last byte.

Pages: the Conversations list, a filtered list (platform, outcome, feedback), a search for a
word in half of the messages (the worst case: the newest matches are sorted out of 50,000), a
conversation (50 messages, 5 runs and their traces), the Feedback page (30 voted runs with
their traces).

Run: `uv run python -m benchmarks.console_conversations` (`--backends sqlite`, `--requests 50`).
Prints the conditions, a table per backend, then one JSON line: `conversations_p95_ms`,
`filtered_p95_ms`, `search_p95_ms`, `conversation_p95_ms`, `feedback_p95_ms`, `page_kb_max`
and the same with `_pg`. Targets: every p95 ≤ 150 ms, pages ≤ 300 KB. A measurement, not a
test.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/console_conversations.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sqlite3
import tempfile
import time
from typing import Any

from benchmarks import console as base
from bots.settings import Settings, SlackSettings
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests.storage import pg

CONVERSATION = "slack:T1:C7:7.0"
PAGES = {
    "conversations": "/conversations",
    "filtered": "/conversations?platform=slack&outcome=error&feedback=down",
    "search": "/conversations?q=tuesdays",
    "conversation": "/conversations/" + CONVERSATION.replace(":", "%3A"),
    "feedback": "/feedback",
}


def trace_rows(runs: list[tuple[Any, ...]], seed: int = 11) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    result = "line of output\n" * 140  # about 2 KB, as a tool's bounded result
    rows: list[tuple[Any, ...]] = []
    for run in runs:
        run_id, started, finished = run[0], run[3], run[4]
        model = {
            "turn": 1,
            "model": "m",
            "input": 1000,
            "output": 200,
            "cache_read": 0,
            "cache_write": 0,
            "cost": 0.01,
            "stop_reason": "tool_use",
            "tool_calls": 1,
        }
        tool = {
            "tool": "read",
            "label": "Read notes.md",
            "arguments": {"text": '{"path": "notes.md"}'},
            "result": {"text": result},
            "error": None,
        }
        answer = {"first_post_ms": rng.uniform(300, 1500)}
        for seq, (kind, ms, data) in enumerate(
            [
                ("model_call", rng.uniform(800, 4000), model),
                ("tool_call", 12.0, tool),
                ("answer", (finished - started) * 1000, answer),
            ],
            start=1,
        ):
            rows.append((run_id, seq, kind, started + seq, ms, json.dumps(data)))
    return rows


TRACE_COLUMNS = ["run_id", "seq", "kind", "at", "duration_ms", "data"]


async def seed(name: str, url: str | None, tmp: Path) -> Any:
    """The base seed and the traces; the store opened over them."""
    data = base.rows(time.time())
    traces = trace_rows(data["runs"])
    if url is None:
        path = tmp / "teammate.db"
        async with SqliteStore.open(path):
            pass
        base.seed_sqlite(path, data)
        with sqlite3.connect(path) as db:
            db.executemany(
                f"INSERT INTO run_trace ({', '.join(TRACE_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                traces,
            )
            db.execute("ANALYZE")
        return SqliteStore.open(path)
    import asyncpg

    async with PostgresStore.open(url):
        pass
    await base.seed_postgres(url, data)
    connection = await asyncpg.connect(url)
    try:
        await connection.copy_records_to_table("run_trace", records=traces, columns=TRACE_COLUMNS)
        await connection.execute("ANALYZE")
    finally:
        await connection.close()
    return PostgresStore.open(url)


async def run_backend(name: str, url: str | None, requests: int, tmp: Path) -> dict[str, Any]:
    settings = Settings(data_dir=tmp, model="scripted", slack=SlackSettings(admins=["UADMIN"]))
    started = time.perf_counter()
    opening = await seed(name, url, tmp)
    async with opening as store:
        indexed = await store.catch_up_search()
        print(
            f"{name}: seeded in {time.perf_counter() - started:.1f} s "
            f"({indexed:,} messages indexed after seeding)",
            flush=True,
        )
        base.PAGES.clear()
        base.PAGES.update(PAGES)
        return await base.measure(store, settings, requests)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"]
    )
    parser.add_argument("--requests", type=int, default=base.REQUESTS)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}")
    print(
        f"{base.MESSAGES:,} messages, {base.RUNS:,} runs (3 trace rows each), "
        f"{base.CHANNELS} channels, {args.requests} requests a page"
    )
    result: dict[str, float] = {}
    for backend in args.backends:
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            url = None
            if backend == "postgres":
                server = stack.enter_context(pg.server())
                if server is None:
                    print(f"postgres: skipped ({pg.unavailable_reason})")
                    continue
                schema = asyncio.run(server.create_schema("bench"))
                url = server.schema_url(schema)
            figures = asyncio.run(run_backend(backend, url, args.requests, Path(tmp)))
        base.table(backend, figures)
        suffix = "_pg" if backend == "postgres" else ""
        for page, f in figures.items():
            result[f"{page}_p95_ms{suffix}"] = round(f["p95_ms"], 1)
        result[f"page_kb_max{suffix}"] = round(max(f["kb"] for f in figures.values()), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
