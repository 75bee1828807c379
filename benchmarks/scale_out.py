"""Teammate scaled out: answers per second with 1 and 2 instances on one PostgreSQL database,
beside 1 instance on SQLite, and the store's own cost per turn on each backend.

Each instance is the real `teammate slack --http` in its own process (the scripted model:
zero latency, a short streamed answer); the fake Slack Web API runs in this process (not in
the instances'), which is also the load balancer: it signs the events and sends them
round-robin over the instances. A tenth of the events is delivered twice (to the next
instance), as Slack's retries and a load balancer's do, so `duplicates` (answers beyond one
per event) means something.

Measured:
- saturated throughput: a burst of N mentions (each a new thread) sent at once after a
  warm-up; answers per second from the first send to the last answer finished (its final
  reaction), for SQLite x1, PostgreSQL x1 and PostgreSQL x2, in `--rounds` rounds that
  alternate the three (the machine is shared: alternating puts them in the same minutes); the
  median round is reported;
- where the CPU went per answer (the instances, this process, the PostgreSQL server), and per
  instance the share of the burst it spent on a core and waiting for one
  (`/proc/<pid>/schedstat`): an instance runnable all the time is bound by the CPU, not by
  something it waits on; from the CPU per answer, what 2 / 1 would be with a core per instance
  and what it can be on this machine's cores (one instance is one event loop: one core);
- store overhead per turn on each backend and PostgreSQL appends/s with 200 conversations at
  once: `benchmarks/pg_bench.py`'s measurement, reused.

Run: `uv run python -m benchmarks.scale_out` or `uv run python benchmarks/scale_out.py`
[--events 400] [--rounds 3] [--turns 300] [--appends 25]. The server: as `pg_bench`
(`TEAMMATE_TEST_DATABASE_URL`, else 127.0.0.1:5432, else a throwaway cluster, fsync off).
Prints the conditions, each round, a table, and last one JSON line with
`pg_overhead_ms_per_turn`, `sqlite_overhead_ms_per_turn`, `answers_per_s_sqlite_1`,
`answers_per_s_1`, `answers_per_s_2`, `scale_2_vs_1`, `cpu_ms_per_answer_1`/`_2`,
`instance_cpu_ms_per_answer_1`/`_2`, `scale_2_vs_1_core_per_instance`,
`scale_2_vs_1_bound_here`, `instance_waiting_for_cpu_2`, `load`,
`pg_appends_per_s_200_concurrent`, `duplicates`, `answered`, `sent`.
Targets: PostgreSQL's overhead per turn within 3x of SQLite's (fencing on); 2 instances at most
1.25x the CPU per answer of 1 (two cores cannot show throughput scaling: one instance with the
fake, the balancer and the database already keeps both busy); zero duplicates. A measurement,
not a test: CI runs it only at a tiny size.
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
import statistics
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


def sched_s(pid: int) -> tuple[float, float]:
    """Seconds a process has run on a CPU and has waited, runnable, for one (Linux
    /proc/<pid>/schedstat, all its threads; zeros elsewhere). The wait says whether a process
    is held back by the machine (waiting for a core) or by something it waits on (neither)."""
    try:
        ran, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


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
            sched_before = [sched_s(pid) for pid in pids]
            own_before = time.process_time()
            pg_before = postgres_cpu_s()
            load_before = os.getloadavg()[0]
            started = time.perf_counter()
            sent = await deliver(session, instances, events)
            answered = await wait_answered(fake, events)
            elapsed = time.perf_counter() - started
            own_cpu = time.process_time() - own_before
            pg_cpu = postgres_cpu_s() - pg_before
            instance_cpu = sum(cpu_s(pid) for pid in pids) - sum(cpu_before)
            sched_after = [sched_s(pid) for pid in pids]
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
        # Per instance, shares of the burst's wall time: on a core, and runnable but waiting
        # for one (the machine's other work, or each other); the rest it waited on something
        # (a database or Web API answer, a lock): only that rest could be a serialisation.
        "instance_on_cpu": [
            (a[0] - b[0]) / elapsed for a, b in zip(sched_after, sched_before, strict=True)
        ],
        "instance_waiting_for_cpu": [
            (a[1] - b[1]) / elapsed for a, b in zip(sched_after, sched_before, strict=True)
        ],
        "load": load,
        "load_before": load_before,
        "elapsed_s": elapsed,
        "duplicates": sum(max(0, answers_in(fake, e) - 1) for e in every),
    }


CONFIGS = (("sqlite_1", 1, "sqlite"), ("pg_1", 1, "pg"), ("pg_2", 2, "pg"))
LABELS = {"sqlite_1": "1 on SQLite", "pg_1": "1 on PostgreSQL", "pg_2": "2 on PostgreSQL"}


async def run(args: argparse.Namespace, server: pg.PgServer, directory: Path) -> dict[str, Any]:
    store = await pg_bench.run(
        str(directory), server, turns_n=args.turns, appends_each=args.appends
    )
    print()
    # Rounds alternate the set-ups (the machine is shared: its load moves between minutes;
    # alternating puts every set-up into the same minutes). The median round is reported.
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in CONFIGS}
    async with FakeSlack() as fake:
        for user in range(USERS):
            fake.add_user(f"U{user:04d}", f"person{user}")
        for round_ in range(args.rounds):
            for name, count, backend in CONFIGS:
                url: str | None = None
                schema = ""
                if backend == "pg":
                    schema = await server.create_schema("scale")
                    url = server.schema_url(schema)
                try:
                    tag = f"{name.replace('_', '')}r{round_}"
                    result = await throughput(fake, tag, count, args.events, directory / tag, url)
                finally:
                    if schema:
                        await server.drop_schema(schema)
                rounds[name].append(result)
                print_round(round_, name, result)
    results = {name: median_round(found) for name, found in rounds.items()}
    print()
    print(f"median of {args.rounds} rounds:")
    print_table(results)
    scale = results["pg_2"]["answers_per_s"] / results["pg_1"]["answers_per_s"]
    per_cpu = cpu_projection(results["pg_1"], results["pg_2"])
    print(f"2 instances / 1: {scale:.2f}x answers/s (what {os.cpu_count()} cores can show)")
    cpu_ratio = per_cpu["cpu_ms_2"] / max(per_cpu["cpu_ms_1"], 1e-9)
    print(
        f"CPU per answer, ms: 1 instance {per_cpu['cpu_ms_1']:.1f} (the instance "
        f"{results['pg_1']['instance_cpu_ms_per_answer']:.1f}), 2 instances "
        f"{per_cpu['cpu_ms_2']:.1f} (the instances "
        f"{results['pg_2']['instance_cpu_ms_per_answer']:.1f}); the fake Slack, load balancer "
        f"and PostgreSQL are the rest: 2 / 1 = {cpu_ratio:.2f}x (target <= 1.25x)"
    )
    print(
        f"per CPU: with a core for each instance (the rest elsewhere) 2 / 1 would be "
        f"{per_cpu['scale_core_per_instance']:.2f}x; on {os.cpu_count()} cores holding "
        f"everything, at most {per_cpu['scale_bound_here']:.2f}x (1 instance bound by its one "
        f"core, 2 by all the machine's cores)"
    )
    return {
        "pg_overhead_ms_per_turn": store["pg_overhead_ms_per_turn"],
        "sqlite_overhead_ms_per_turn": store["sqlite_overhead_ms_per_turn"],
        "pg_vs_sqlite_per_turn": store["pg_vs_sqlite_per_turn"],
        "answers_per_s_sqlite_1": round(results["sqlite_1"]["answers_per_s"], 1),
        "answers_per_s_1": round(results["pg_1"]["answers_per_s"], 1),
        "answers_per_s_2": round(results["pg_2"]["answers_per_s"], 1),
        "scale_2_vs_1": round(scale, 2),
        "cpu_ms_per_answer_1": round(per_cpu["cpu_ms_1"], 2),
        "cpu_ms_per_answer_2": round(per_cpu["cpu_ms_2"], 2),
        "instance_cpu_ms_per_answer_1": round(results["pg_1"]["instance_cpu_ms_per_answer"], 2),
        "instance_cpu_ms_per_answer_2": round(results["pg_2"]["instance_cpu_ms_per_answer"], 2),
        "scale_2_vs_1_core_per_instance": round(per_cpu["scale_core_per_instance"], 2),
        "scale_2_vs_1_bound_here": round(per_cpu["scale_bound_here"], 2),
        "instance_waiting_for_cpu_2": round(
            statistics.mean(results["pg_2"]["instance_waiting_for_cpu"]), 2
        ),
        "load": round(statistics.median(r["load"] for r in results.values()), 2),
        "rounds": args.rounds,
        "pg_appends_per_s_200_concurrent": store["pg_appends_per_s_200_concurrent"],
        "duplicates": sum(r["duplicates"] for found in rounds.values() for r in found),
        "answered": sum(r["answered"] for found in rounds.values() for r in found),
        "sent": sum(r["events"] for found in rounds.values() for r in found),
    }


def median_round(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median throughput (its other figures belong with it)."""
    ordered = sorted(found, key=lambda r: float(r["answers_per_s"]))
    return ordered[(len(ordered) - 1) // 2]


def cpu_projection(one: dict[str, Any], two: dict[str, Any]) -> dict[str, float]:
    """What the CPU per answer says the 2 / 1 ratio can be. One instance is one event loop:
    at most one core, 1000 / its ms per answer. With a core for each instance (the fake Slack,
    the load balancer and PostgreSQL elsewhere) two would reach twice their own rate; on this
    machine two share its cores with everything else: cores * 1000 / all the ms per answer."""

    def everything(r: dict[str, Any]) -> float:
        return float(
            r["instance_cpu_ms_per_answer"]
            + r["fake_cpu_ms_per_answer"]
            + r["pg_cpu_ms_per_answer"]
        )

    instance_1 = max(float(one["instance_cpu_ms_per_answer"]), 1e-9)
    instance_2 = max(float(two["instance_cpu_ms_per_answer"]), 1e-9)
    cores = os.cpu_count() or 1
    rate_1 = min(1000 / instance_1, cores * 1000 / max(everything(one), 1e-9))
    rate_2_here = min(2000 / instance_2, cores * 1000 / max(everything(two), 1e-9))
    return {
        "cpu_ms_1": everything(one),
        "cpu_ms_2": everything(two),
        "scale_core_per_instance": (2000 / instance_2) / (1000 / instance_1),
        "scale_bound_here": rate_2_here / rate_1,
    }


def print_round(round_: int, name: str, r: dict[str, Any]) -> None:
    on_cpu = "+".join(f"{x:.2f}" for x in r["instance_on_cpu"])
    waiting = "+".join(f"{x:.2f}" for x in r["instance_waiting_for_cpu"])
    print(
        f"round {round_ + 1} {LABELS[name]:<16} {r['answers_per_s']:7.1f} answers/s "
        f"{r['answered']}/{r['events']} in {r['elapsed_s']:.1f} s; load {r['load_before']:.1f}"
        f"->{r['load']:.1f}; instance on a core {on_cpu}, waiting for one {waiting} (share of "
        f"wall time)",
        flush=True,
    )


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(
        f"{'instances':<20}{'answers/s':>10}{'answered':>10}{'deliveries':>11}{'dups':>5}"
        f"{'cpu ms/answer: instances':>26}{'fake+LB':>9}{'postgres':>10}{'cores busy':>11}"
        f"{'load':>6}{'inst. waiting for a core':>26}"
    )
    for name, _, _ in CONFIGS:
        r = results[name]
        waiting = "+".join(f"{x:.2f}" for x in r["instance_waiting_for_cpu"])
        print(
            f"{LABELS[name]:<20}{r['answers_per_s']:>10.1f}{r['answered']:>7}/{r['events']:<4}"
            f"{r['deliveries']:>9}{r['duplicates']:>5}{r['instance_cpu_ms_per_answer']:>26.1f}"
            f"{r['fake_cpu_ms_per_answer']:>9.1f}{r['pg_cpu_ms_per_answer']:>10.1f}"
            f"{r['cpu_busy']:>11.2f}{r['load']:>6.1f}{waiting:>26}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=400, help="mentions per burst")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three set-ups")
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
                f"(1 in {TWICE_EVERY} delivered twice) after {WARMUP_EVENTS} warm-up each; "
                f"{args.rounds} rounds alternating the set-ups; load {os.getloadavg()[0]:.1f}"
            )
            print()
            figures = asyncio.run(run(args, server, Path(directory)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
