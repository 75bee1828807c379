"""The console's pages over a large database, on SQLite and on PostgreSQL.

Seeds 100,000 messages, 10,000 runs (with their usage, a vote on one in ten, and each run's
trace: a model call, a tool call with 2 KB of result, its answer with its first visible post,
30,000 trace rows) and 50 channels (2,000 conversations, spread over the last 45 days, and
1,000 audit entries) on each backend — seeded with bulk inserts, the store having made the
schema; SQLite's search index caught up once after seeding, as the trace recorder keeps it
while Teammate runs — then serves the console (`bots.console`, in this process, on 127.0.0.1)
and requests each page `REQUESTS` times, signed in as an admin. Server time is the time from
sending the request to the last byte of the answer (on this machine's loopback, so an upper
bound of the server's). Page weight is the HTML's size (the shipped scripts and stylesheet are
cached once, and counted apart).

Pages (`--pages overview`): the overview (30 days, all channels, its waiting times from the
traces' answers), the overview of one channel (a filtered view), the channel list, one
channel's page, the audit log, health. `--pages conversations`: the Conversations list, a
filtered list (platform, outcome, feedback), a search for a word in half of the messages (the
worst case: the newest matches are sorted out of 50,000), a conversation (50 messages, 5 runs
and their traces), the Feedback page (30 voted runs with their traces). Both by default, over
one seed. (`benchmarks.console_conversations` is this with `--pages conversations`.)

Run: `uv run python -m benchmarks.console` (`--backends sqlite`, `--requests 50`, `--pages`).
The PostgreSQL server as in `benchmarks/pg_bench.py`. Prints the conditions, a table per
backend, then one JSON line with `<page>_p95_ms` for each page measured (`overview`,
`filtered`, `channels`, `channel`, `audit`, `health`, `conversations`,
`conversations_filtered`, `search`, `conversation`, `feedback`), `page_kb_max`, and the same
with `_pg`. Targets: every p95 ≤ 150 ms, pages ≤ 300 KB. A measurement, not a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/console.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from typing import Any

import aiohttp

from bots.console.service import open_console
from bots.console.sessions import SESSION_COOKIE
from bots.settings import Settings, SlackSettings
from core.messages import AssistantMessage, UserMessage, dump_message
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests.storage import pg

MESSAGES = 100_000
RUNS = 10_000
CHANNELS = 50
CONVERSATIONS = 2_000
AUDIT = 1_000
DAYS = 45
REQUESTS = 50
WARMUP = 5
CHANNEL = "slack:T1:C7"
CONVERSATION = "slack:T1:C7:7.0"
PAGE_SETS = {
    "overview": {
        "overview": "/",
        "filtered": f"/?platform=slack&channel={CHANNEL}",
        "channels": "/channels",
        "channel": f"/channels/{CHANNEL}",
        "audit": "/audit",
        "health": "/health",
    },
    "conversations": {
        "conversations": "/conversations",
        "conversations_filtered": "/conversations?platform=slack&outcome=error&feedback=down",
        "search": "/conversations?q=tuesdays",
        "conversation": "/conversations/" + CONVERSATION.replace(":", "%3A"),
        "feedback": "/feedback",
    },
}


def rows(now: float, seed: int = 7) -> dict[str, list[tuple[Any, ...]]]:
    """Every seeded row, ids from 1, times within the last `DAYS` days."""
    rng = random.Random(seed)
    conversations, runs, messages, ledger, votes, audit = [], [], [], [], [], []
    per_conversation = RUNS // CONVERSATIONS
    messages_per_run = MESSAGES // RUNS
    body_user = _text(dump_message(UserMessage(content="how do we deploy on Tuesdays?")))
    body_reply = _text(
        dump_message(
            AssistantMessage(content=[{"type": "text", "text": "Like this: " + "step " * 40}])
        )
    )
    for c in range(1, CONVERSATIONS + 1):
        channel = f"slack:T1:C{c % CHANNELS}" if c % 5 else f"discord:G1:{c % CHANNELS}"
        created = now - rng.uniform(0, DAYS * 86400)
        seq = 0
        conversations.append((c, f"{channel}:{c}.0", channel, created, created))
        for r in range(per_conversation):
            run_id = (c - 1) * per_conversation + r + 1
            started = created + r * 600
            took = rng.uniform(2, 40)
            outcome = rng.choices(["done", "error", "aborted", "interrupted"], [90, 4, 4, 2])[0]
            cost = rng.uniform(0.001, 0.05)
            user = f"U{rng.randint(1, 200)}"
            runs.append((run_id, c, outcome, started, started + took, user, channel, "m", cost))
            ledger.append((run_id, c, user, channel, "m", started + took, 1000, 200, cost))
            if run_id % 10 == 0:
                votes.append(
                    (run_id, f"U{rng.randint(1, 200)}", rng.choice(["up", "down"]), started + took)
                )
            for m in range(messages_per_run):
                seq += 1
                role = "user" if m % 2 == 0 else "assistant"
                body = body_user if role == "user" else body_reply
                messages.append((c, seq, role, run_id, started + m, body))
    for a in range(AUDIT):
        audit.append(
            (
                now - rng.uniform(0, DAYS * 86400),
                f"slack:U{a % 7}",
                "config.set",
                f"slack:T1:C{a % CHANNELS}",
                "slack",
                '{"change": {"prompt": "x"}}',
            )
        )
    return {
        "conversations": conversations,
        "runs": runs,
        "messages": messages,
        "usage_ledger": ledger,
        "run_feedback": votes,
        "audit_log": sorted(audit),
        "run_trace": trace_rows(runs),
    }


def trace_rows(runs: list[tuple[Any, ...]], seed: int = 11) -> list[tuple[Any, ...]]:
    """Each run's trace: a model call, a tool call with a bounded 2 KB result, its answer."""
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


def _text(body: str | bytes) -> str:
    return body.decode() if isinstance(body, bytes) else body


COLUMNS = {
    "conversations": "id, key, channel_key, created_at, updated_at",
    "runs": "id, conversation_id, outcome, started_at, finished_at, user_id, channel_key, "
    "model, cost_usd",
    "messages": "conversation_id, seq, role, run_id, created_at, body",
    "usage_ledger": "run_id, conversation_id, user_id, channel_key, model, at, input_tokens, "
    "output_tokens, cost_usd",
    "run_feedback": "run_id, user_id, vote, at",
    "audit_log": "at, actor, action, target, origin, detail",
    "run_trace": "run_id, seq, kind, at, duration_ms, data",
}
EXTRA = {"usage_ledger": ", cache_read_tokens, cache_write_tokens"}


def seed_sqlite(path: Path, data: dict[str, list[tuple[Any, ...]]]) -> None:
    with sqlite3.connect(path) as db:
        for table, values in data.items():
            columns = COLUMNS[table] + EXTRA.get(table, "")
            width = len(values[0]) + (2 if table in EXTRA else 0)
            pad = (0, 0) if table in EXTRA else ()
            marks = ", ".join("?" * width)
            db.executemany(
                f"INSERT INTO {table} ({columns}) VALUES ({marks})", [(*v, *pad) for v in values]
            )
        db.execute(
            "UPDATE conversations SET last_seq = (SELECT MAX(seq) FROM messages "
            "WHERE conversation_id = conversations.id)"
        )
        db.execute("ANALYZE")


async def seed_postgres(url: str, data: dict[str, list[tuple[Any, ...]]]) -> None:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        for table, values in data.items():
            columns = [c.strip() for c in (COLUMNS[table] + EXTRA.get(table, "")).split(",")]
            pad = (0, 0) if table in EXTRA else ()
            records = [(*v, *pad) for v in values]
            if table in ("conversations", "runs"):
                await connection.execute(f"ALTER TABLE {table} ALTER COLUMN id DROP IDENTITY")
            await connection.copy_records_to_table(table, records=records, columns=columns)
        await connection.execute(
            "UPDATE conversations c SET last_seq = m.s FROM (SELECT conversation_id, MAX(seq) s "
            "FROM messages GROUP BY conversation_id) m WHERE m.conversation_id = c.id"
        )
        await connection.execute("ANALYZE")
    finally:
        await connection.close()


async def measure(
    store: Any, settings: Settings, requests: int, pages: dict[str, str]
) -> dict[str, Any]:
    console = await open_console(settings, store)
    await console.start("127.0.0.1", 0)
    try:
        _session, cookie = console.deps.sessions.new(
            "slack:UADMIN", "Ada", "admin", now=time.time()
        )
        figures: dict[str, Any] = {}
        async with aiohttp.ClientSession(
            cookies={SESSION_COOKIE: cookie}, cookie_jar=aiohttp.CookieJar(unsafe=True)
        ) as http:
            for name, path in pages.items():
                times, size = [], 0
                for n in range(WARMUP + requests):
                    started = time.perf_counter()
                    async with http.get(console.url + path, allow_redirects=False) as response:
                        body = await response.read()
                        assert response.status == 200, (path, response.status)
                    if n >= WARMUP:
                        times.append((time.perf_counter() - started) * 1000)
                    size = len(body)
                times.sort()
                figures[name] = {
                    "p50_ms": statistics.median(times),
                    "p95_ms": times[int(0.95 * (len(times) - 1))],
                    "kb": size / 1024,
                }
        return figures
    finally:
        await console.close()


async def run_backend(
    name: str, url: str | None, requests: int, tmp: Path, pages: dict[str, str]
) -> dict[str, Any]:
    settings = Settings(data_dir=tmp, model="scripted", slack=SlackSettings(admins=["UADMIN"]))
    now = time.time()
    started = time.perf_counter()
    data = rows(now)
    if url is None:
        path = tmp / "teammate.db"
        async with SqliteStore.open(path):
            pass
        seed_sqlite(path, data)
        opening: Any = SqliteStore.open(path)
    else:
        async with PostgresStore.open(url):
            pass
        await seed_postgres(url, data)
        opening = PostgresStore.open(url)
    async with opening as store:
        indexed = await store.catch_up_search()
        print(
            f"{name}: seeded in {time.perf_counter() - started:.1f} s "
            f"({indexed:,} messages indexed after seeding)",
            flush=True,
        )
        return await measure(store, settings, requests, pages)


def table(name: str, figures: dict[str, Any]) -> None:
    print(f"\n{name}: page{'':<20}p50 ms   p95 ms   KB")
    for page, f in figures.items():
        print(f"  {page:<24}{f['p50_ms']:7.1f}  {f['p95_ms']:7.1f}  {f['kb']:6.1f}")


def main(default_pages: str = "overview,conversations") -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--pages", default=default_pages, help="overview, conversations or both")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    pages: dict[str, str] = {}
    for wanted in (p.strip() for p in args.pages.split(",") if p.strip()):
        if wanted not in PAGE_SETS:
            parser.error(f"--pages: one of {', '.join(PAGE_SETS)}, not {wanted[:40]!r}")
        pages.update(PAGE_SETS[wanted])
    print(
        f"conditions: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {MESSAGES:,} messages, "
        f"{RUNS:,} runs (3 trace rows each), {CHANNELS} channels, "
        f"{CONVERSATIONS:,} conversations; "
        f"{args.requests} requests per page after {WARMUP} to warm up"
    )
    result: dict[str, Any] = {}
    with (
        pg.server() if "postgres" in backends else contextlib.nullcontext(None) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for backend in backends:
            suffix = "" if backend == "sqlite" else "_pg"
            if backend == "postgres":
                if server is None:
                    print(f"postgres: skipped ({pg.unavailable_reason})")
                    continue
                print(f"PostgreSQL {server.version}")
                schema = asyncio.run(server.create_schema("bench"))
                url: str | None = server.schema_url(schema)
            else:
                url = None
            figures = asyncio.run(
                run_backend(backend, url, args.requests, Path(tmp) / backend, pages)
            )
            table(backend, figures)
            for page, f in figures.items():
                result[f"{page}_p95_ms{suffix}"] = round(f["p95_ms"], 1)
            result[f"page_kb_max{suffix}"] = round(max(f["kb"] for f in figures.values()), 1)
    assets = Path(__file__).resolve().parent.parent / "bots" / "console" / "static"
    weight = sum(p.stat().st_size for p in assets.rglob("*") if p.suffix in (".js", ".css"))
    print(f"\nassets (cached after the first page): {weight / 1024:.0f} KB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
