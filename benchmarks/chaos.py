"""Proof under fire: crash runs on both backends, then the fault scenarios, in one report.

Crash anywhere (`tests/chaos/crash_harness.py`): the real `teammate slack --http` answers a
mention with a streamed text, a `web_fetch` tool call and a streamed final reply, against the
fake Slack and the fake Anthropic API in this process; at a seeded moment (the author's name
being looked up after the ack, the first stream, the tool, the request after it, the final
stream, a Web API write into the thread) a fake SIGKILLs it. It is restarted (SQLite, one
process) or the two other instances take the conversation over (PostgreSQL, three instances,
10 s leases); a follow-up in the thread must then be answered. Counted per run: user messages
missing from the store, answers shown twice, tool calls without results, interrupted answers
and their announcements (exactly one each), the follow-up answered once. A run whose kill
never fired (the answer finished first) tested no crash: it is counted as missed, not
survived. Every process it starts (the instances, a throwaway PostgreSQL cluster) ends with
it, also when it is interrupted or killed.

The other scenarios (model and platform outages, the flood, hostile input, disk and database
faults, secrets) are `benchmarks/chaos_faults.py`'s `run_fault_scenarios`.

Run: `uv run python -m benchmarks.chaos` or `uv run python benchmarks/chaos.py`
[--runs 50] [--seed 13] [--backends sqlite,postgres] [--quick]. PostgreSQL as `pg_bench`
finds it (`TEAMMATE_TEST_DATABASE_URL`, else 127.0.0.1:5432, else a throwaway cluster; none:
its runs are reported as skipped). Prints the conditions, a table per backend, and last one
JSON line with `crash_<backend>_survived` / `crash_<backend>_attempted` (and
`crash_<backend>_missed`), `user_messages_lost`,
`duplicate_replies`, `interrupted_announced` / `interrupted_answers`, and the fault
scenarios' figures (flood answered exactly once / sent, peak memory under flood, fault
scenarios recovered / tried). Targets: every run survived, zero lost, zero duplicates, every
interruption announced once. A measurement, not a test: CI runs it only with `--quick`.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/chaos.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tests.chaos.crash_harness import Backend, CrashReport, RunResult, crash_runs
from tests.storage import pg

QUICK_RUNS = 1  # per backend, with --quick

FaultScenarios = Callable[[bool], Awaitable[dict[str, float]]]


def fault_scenarios() -> FaultScenarios | None:
    """`benchmarks.chaos_faults.run_fault_scenarios`, or None while that module is not there."""
    try:
        module = importlib.import_module("benchmarks.chaos_faults")
    except ModuleNotFoundError as exc:
        if exc.name != "benchmarks.chaos_faults":
            raise
        return None
    found: FaultScenarios = module.run_fault_scenarios
    return found


def table(report: CrashReport) -> list[str]:
    lines = [
        f"{report.backend}: {report.survived}/{len(report.runs)} runs survived"
        + (f" ({report.missed} missed: the kill never fired)" if report.missed else "")
    ]
    lines.append(f"  {'phase':<14}{'runs':>6}{'survived':>10}{'interrupted':>13}{'announced':>11}")
    by_phase: dict[str, list[RunResult]] = {}
    for result in report.runs:
        by_phase.setdefault(result.phase, []).append(result)
    for phase, results in sorted(by_phase.items()):
        lines.append(
            f"  {phase:<14}{len(results):>6}{sum(r.survived for r in results):>10}"
            f"{sum(r.interrupted for r in results):>13}"
            f"{sum(r.interrupted and r.announced == 1 for r in results):>11}"
        )
    for result in report.runs:
        if not result.survived:
            lines.append(f"  run {result.run} ({result.phase}, {result.hit}): {result.problem}")
    return lines


async def crash_backend(
    backend: Backend, runs: int, seed: int, url: str | None, print_: Callable[[str], None]
) -> CrashReport:
    started = time.monotonic()

    def progress(result: RunResult) -> None:
        status = "ok" if result.survived else f"FAILED: {result.problem}"
        print_(
            f"  {backend} run {result.run + 1}/{runs} ({time.monotonic() - started:.0f} s): "
            f"{result.phase}, hit {result.hit or 'nothing (the answer finished first)'}: {status}"
        )

    return await crash_runs(backend, runs, seed=seed, database_url=url, progress=progress)


async def run(
    args: argparse.Namespace, server: pg.PgServer | None, print_: Callable[[str], None]
) -> dict[str, Any]:
    runs = QUICK_RUNS if args.quick else args.runs
    figures: dict[str, Any] = {}
    reports: list[CrashReport] = []
    for backend in args.backends:
        if backend == "postgres":
            if server is None:
                print_(f"postgres: skipped (no PostgreSQL server: {pg.unavailable_reason})")
                figures["crash_postgres_survived"] = figures["crash_postgres_attempted"] = None
                continue
            schema = await server.create_schema("chaos")
            try:
                report = await crash_backend(
                    "postgres", runs, args.seed, server.schema_url(schema), print_
                )
            finally:
                await server.drop_schema(schema)
        else:
            report = await crash_backend("sqlite", runs, args.seed, None, print_)
        reports.append(report)
        figures[f"crash_{backend}_survived"] = report.survived
        figures[f"crash_{backend}_attempted"] = len(report.runs)
        figures[f"crash_{backend}_missed"] = report.missed
        figures[f"crash_{backend}_phases"] = report.phases()
    figures["user_messages_lost"] = sum(r.lost for r in reports)
    figures["duplicate_replies"] = sum(r.duplicates for r in reports)
    figures["interrupted_announced"] = sum(r.announced_once for r in reports)
    figures["interrupted_answers"] = sum(r.interrupted for r in reports)
    print_("")
    for report in reports:
        for line in table(report):
            print_(line)

    scenarios = fault_scenarios()
    if scenarios is None:
        print_(
            "\nfault scenarios: not run — benchmarks/chaos_faults.py (issue 13's other "
            "scenarios) is not in this checkout yet"
        )
        figures["fault_scenarios"] = "not available"
    else:
        print_("\nfault scenarios (benchmarks/chaos_faults.py):")
        faults = await scenarios(args.quick)
        for name, value in faults.items():
            print_(f"  {name:<40}{value}")
        figures.update(faults)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="crash runs per backend")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--backends",
        type=lambda text: [b.strip() for b in text.split(",") if b.strip()],
        default=["sqlite", "postgres"],
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} run per backend")
    args = parser.parse_args(argv)
    for backend in args.backends:
        if backend not in ("sqlite", "postgres"):
            parser.error(f"unknown backend {backend!r}")
    print(
        f"conditions: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; the real `teammate slack "
        f"--http` against the fake Slack and Anthropic APIs; seed {args.seed}, "
        f"{QUICK_RUNS if args.quick else args.runs} crash runs per backend"
    )
    wanted = "postgres" in args.backends
    with pg.server() if wanted else contextlib.nullcontext(None) as server:
        if server is not None:
            print(f"PostgreSQL {server.version}")
        figures = asyncio.run(run(args, server, lambda line: print(line, flush=True)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
