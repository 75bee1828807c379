"""Teammate scaled out: answers per second with 1 and 2 instances on one PostgreSQL database,
beside 1 instance on SQLite, and the store's own cost per turn on each backend.

Each instance is the real `teammate slack --http` in its own process (the scripted model:
zero latency, a short streamed answer); the fake Slack Web API runs in this process, which is
also the load balancer: it signs the events and sends them round-robin over the instances.
A tenth of the events is delivered twice (to the next instance), as Slack's retries and a
load balancer's do, so `duplicates` (answers beyond one per event) means something.

Measured:
- saturated throughput: a burst of N mentions (each a new thread) sent at once after a
  warm-up; answers per second from the first send to the last answer finished (its final
  reaction), for SQLite x1, PostgreSQL x1 and PostgreSQL x2;
- store overhead per turn on each backend and PostgreSQL appends/s with 200 conversations at
  once: `benchmarks/pg_bench.py`'s measurement, reused.

Run: `uv run python -m benchmarks.scale_out` or `uv run python benchmarks/scale_out.py`
[--events 400] [--turns 300] [--appends 25]. The server: as `pg_bench`
(`TEAMMATE_TEST_DATABASE_URL`, else 127.0.0.1:5432, else a throwaway cluster, fsync off).
Prints the conditions, a table, and last one JSON line with `pg_overhead_ms_per_turn`,
`sqlite_overhead_ms_per_turn`,
`answers_per_s_sqlite_1`, `answers_per_s_1`, `answers_per_s_2`, `scale_2_vs_1`,
`pg_appends_per_s_200_concurrent`, `duplicates`, `answered`, `sent`.
Targets: PostgreSQL's overhead per turn within 3x of SQLite's; 2 instances at least 1.5x the
answers/s of 1; zero duplicates. A measurement, not a test: CI runs it only at a tiny size.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/scale_out.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from typing import Any

import aiohttp

from benchmarks import pg_bench
from benchmarks.slack_ack import (
    ANSWER_TEXT,
    USERS,
    Prepared,
    Target,
    child_env,
    post,
    prepare,
    start_target,
    wait_answered,
)
from tests.fakes.slack_server import FakeSlack
from tests.storage import pg

ROOT = Path(__file__).resolve().parent.parent
TWICE_EVERY = 10  # every 10th event is delivered a second time, to another instance
WARMUP_EVENTS = 4  # per instance
CONNECTIONS = 100


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float:
    """CPU seconds of every PostgreSQL server process on this machine (a local server's
    share of the work: its backends are processes of their own)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/comm"):
        try:
            if stat.read_text().strip() == "postgres":
                total += cpu_s(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return total


def answers_in(fake: FakeSlack, event: Prepared) -> int:
    return sum(ANSWER_TEXT in json.dumps(m) for m in fake.bot_replies(event.channel, event.ts))


async def start_instances(
    fake: FakeSlack, count: int, directory: Path, database_url: str | None
) -> list[Target]:
    async def one(n: int) -> Target:
        env = child_env(fake, str(directory / f"instance{n}"))
        if database_url is not None:
            env["TEAMMATE_DATABASE_URL"] = database_url
        command = [sys.executable, "-m", "bots.cli", "slack", "--http"]
        command += ["--host", "127.0.0.1", "--port", "0"]
        return await start_target(f"instance {n}", command, env, str(ROOT))

    if database_url is None:
        return [await one(0)]
    first = await one(0)  # migrates the schema alone; the others find it done
    return [first, *await asyncio.gather(*(one(n) for n in range(1, count)))]


async def deliver(
    session: aiohttp.ClientSession, instances: list[Target], events: list[Prepared]
) -> int:
    """Round-robin over the instances, every TWICE_EVERY-th event also to the next one;
    how many deliveries were made."""
    sends = []
    for i, event in enumerate(events):
        sends.append(post(session, instances[i % len(instances)].url, event))
        if i % TWICE_EVERY == TWICE_EVERY - 1:
            sends.append(post(session, instances[(i + 1) % len(instances)].url, event))
    await asyncio.gather(*sends)
    return len(sends)


async def throughput(
    fake: FakeSlack, tag: str, count: int, events_n: int, directory: Path, url: str | None
) -> dict[str, Any]:
    instances = await start_instances(fake, count, directory, url)
    try:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS)
        async with aiohttp.ClientSession(connector=connector) as session:
            warm = prepare(fake, WARMUP_EVENTS * count, tag + "w")
            await deliver(session, instances, warm)
            await wait_answered(fake, warm)
            events = prepare(fake, events_n, tag)
            pids = [instance.process.pid for instance in instances]
            cpu_before = [cpu_s(pid) for pid in pids]
            own_before = time.process_time()
            pg_before = postgres_cpu_s()
            started = time.perf_counter()
            sent = await deliver(session, instances, events)
            answered = await wait_answered(fake, events)
            elapsed = time.perf_counter() - started
            own_cpu = time.process_time() - own_before
            pg_cpu = postgres_cpu_s() - pg_before
            instance_cpu = sum(cpu_s(pid) for pid in pids) - sum(cpu_before)
            load = os.getloadavg()[0]
    finally:
        for instance in instances:
            await instance.stop()
    every = [*warm, *events]
    return {
        "answers_per_s": answered / elapsed,
        "answered": answered,
        "events": events_n,
        "deliveries": sent,
        # Where the CPU went during the burst: the instances, and this process (the fake
        # Slack and the load balancer); with the machine's load, it says what limits scaling.
        "instance_cpu_ms_per_answer": instance_cpu * 1000 / max(answered, 1),
        "fake_cpu_ms_per_answer": own_cpu * 1000 / max(answered, 1),
        "pg_cpu_ms_per_answer": pg_cpu * 1000 / max(answered, 1),
        "cpu_busy": (instance_cpu + own_cpu + pg_cpu) / elapsed,
        "load": load,
        "duplicates": sum(max(0, answers_in(fake, e) - 1) for e in every),
    }


async def run(args: argparse.Namespace, server: pg.PgServer, directory: Path) -> dict[str, Any]:
    store = await pg_bench.run(
        str(directory), server, turns_n=args.turns, appends_each=args.appends
    )
    print()
    results: dict[str, dict[str, Any]] = {}
    async with FakeSlack() as fake:
        for user in range(USERS):
            fake.add_user(f"U{user:04d}", f"person{user}")
        for name, count, backend in (
            ("sqlite_1", 1, "sqlite"),
            ("pg_1", 1, "pg"),
            ("pg_2", 2, "pg"),
        ):
            url: str | None = None
            schema = ""
            if backend == "pg":
                schema = await server.create_schema("scale")
                url = server.schema_url(schema)
            try:
                results[name] = await throughput(
                    fake, name.replace("_", ""), count, args.events, directory / name, url
                )
            finally:
                if schema:
                    await server.drop_schema(schema)
    print(
        f"{'instances':<20}{'answers/s':>10}{'answered':>10}{'deliveries':>11}{'dups':>5}"
        f"{'cpu ms/answer: instances':>26}{'fake+LB':>9}{'postgres':>10}{'cores busy':>11}"
        f"{'load':>6}"
    )
    for name, label in (
        ("sqlite_1", "1 on SQLite"),
        ("pg_1", "1 on PostgreSQL"),
        ("pg_2", "2 on PostgreSQL"),
    ):
        r = results[name]
        print(
            f"{label:<20}{r['answers_per_s']:>10.1f}{r['answered']:>7}/{r['events']:<4}"
            f"{r['deliveries']:>9}{r['duplicates']:>5}{r['instance_cpu_ms_per_answer']:>26.1f}"
            f"{r['fake_cpu_ms_per_answer']:>9.1f}{r['pg_cpu_ms_per_answer']:>10.1f}"
            f"{r['cpu_busy']:>11.2f}{r['load']:>6.1f}"
        )
    scale = results["pg_2"]["answers_per_s"] / results["pg_1"]["answers_per_s"]
    print(f"2 instances / 1: {scale:.2f}x (target >= 1.5x)")
    return {
        "pg_overhead_ms_per_turn": store["pg_overhead_ms_per_turn"],
        "sqlite_overhead_ms_per_turn": store["sqlite_overhead_ms_per_turn"],
        "pg_vs_sqlite_per_turn": store["pg_vs_sqlite_per_turn"],
        "answers_per_s_sqlite_1": round(results["sqlite_1"]["answers_per_s"], 1),
        "answers_per_s_1": round(results["pg_1"]["answers_per_s"], 1),
        "answers_per_s_2": round(results["pg_2"]["answers_per_s"], 1),
        "scale_2_vs_1": round(scale, 2),
        "pg_appends_per_s_200_concurrent": store["pg_appends_per_s_200_concurrent"],
        "duplicates": sum(r["duplicates"] for r in results.values()),
        "answered": sum(r["answered"] for r in results.values()),
        "sent": sum(r["events"] for r in results.values()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=400, help="mentions per burst")
    parser.add_argument("--turns", type=int, default=pg_bench.TURNS, help="store turns measured")
    parser.add_argument(
        "--appends", type=int, default=pg_bench.CONCURRENT_APPENDS_EACH, help="appends each of 200"
    )
    args = parser.parse_args(argv)
    with pg.server() as server:
        if server is None:
            print(f"no PostgreSQL server: {pg.unavailable_reason}")
            raise SystemExit(1)
        with tempfile.TemporaryDirectory(prefix="teammate-scale-") as directory:
            where = "throwaway cluster, fsync off" if server.throwaway else "existing server"
            print(f"python {platform.python_version()}; postgresql {server.version} ({where})")
            print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
            print(
                f"each instance: `teammate slack --http`, scripted model (zero latency); the fake "
                f"Slack and the load balancer in this process; bursts of {args.events} mentions "
                f"(1 in {TWICE_EVERY} delivered twice) after {WARMUP_EVENTS} warm-up each"
            )
            print()
            figures = asyncio.run(run(args, server, Path(directory)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
