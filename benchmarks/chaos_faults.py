"""Issue 13's fault scenarios as figures: the flood, model and platform outages, disk and
database faults, secrets. `benchmarks/chaos.py` imports `run_fault_scenarios`; this file also
runs alone.

Everything is the assembled Slack app in HTTP mode (the real bolt app, slack_sdk, runner,
SQLite store, ModelFactory and AnthropicModel) against FakeSlack and FakeAnthropic on
127.0.0.1, the same scenarios as tests/chaos/test_fault_*.py, test_hostile_context.py and
test_secrets_no_leak.py (each scenario IS that test's coroutine, run here at full size):

- flood: 2,000 messages over 200 threads in 10 channels and 50 people, paced over 20 s, a
  tenth delivered twice (Slack's retry of the event, or the post as both `app_mention` and
  `message`); every distinct message must be answered exactly once, in the order accepted
  within its thread. Peak memory is the process's peak RSS (app and fakes share it).
- faults: the model answering 529, 500, an error mid-stream, hanging 120 s before the headers
  or mid-stream (cut by the idle timeout); Slack answering 429 and 500 for a while and 500
  for good, its Socket Mode connection dropping mid-answer; the database locked by another
  program; the disk full; a read-only data directory; the PostgreSQL server restarted
  mid-answer; an over-long message; every secret kept out of logs, chat, the model and the
  store. A scenario is recovered when its checks all pass (one clear message, nothing lost,
  the next message answered); one that cannot run here (no root for a small disk, no
  PostgreSQL) is counted as skipped, not tried.

Run: `uv run python benchmarks/chaos_faults.py [--quick]` (or `python -m
benchmarks.chaos_faults`). --quick: a 200-message flood and two faults (seconds, for CI).
Prints conditions, a table, and last one JSON line. Targets: flood_answered_once ==
flood_sent, no duplicates, faults_recovered == faults_tried.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/chaos_faults.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import logging
import os
import platform
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.chaos import (
    test_fault_disk,
    test_fault_model,
    test_fault_platform,
    test_fault_postgres,
    test_hostile_context,
    test_secrets_no_leak,
)
from tests.chaos.flood_kit import flood

Scenario = Callable[[Path], Awaitable[None]]


def _model_fault(fault: str) -> Scenario:
    async def scenario(path: Path) -> None:
        await test_fault_model.test_a_model_outage_shows_one_clear_message_backs_off_and_recovers(
            path, fault
        )

    return scenario


def _scenarios(quick: bool) -> dict[str, Scenario]:
    found: dict[str, Scenario] = {
        f"model {fault}": _model_fault(fault) for fault in test_fault_model.FAULTS
    }
    disk = test_fault_disk
    found["database locked"] = (
        disk.test_a_database_locked_by_another_program_is_said_and_then_answered
    )
    found["disk full"] = disk.test_a_full_disk_is_said_nothing_is_corrupted_and_service_resumes
    found["data dir read-only"] = disk.test_a_read_only_data_directory_is_one_clear_line_at_start
    found["message over the context"] = (
        test_hostile_context.test_a_message_over_the_context_is_refused_before_the_model_is_called
    )
    found["postgres restarted"] = (
        test_fault_postgres.test_a_postgres_restart_mid_answer_is_said_and_service_resumes
    )
    found["secrets kept"] = _secrets
    found |= {f"slack {name}": scenario for name, scenario in test_fault_platform.SCENARIOS.items()}
    if quick:
        return {name: found[name] for name in ("model 529", "database locked")}
    return found


async def _secrets(path: Path) -> None:
    patch = pytest.MonkeyPatch()
    try:
        await test_secrets_no_leak.test_no_secret_reaches_a_log_a_chat_the_model_or_the_store(
            path, patch
        )
    finally:
        patch.undo()


async def _try(name: str, scenario: Scenario, root: Path) -> str:
    """'recovered', 'failed: …' or 'skipped: …' (e.g. no root to mount a small disk)."""
    path = root / name.replace(" ", "-")
    path.mkdir()
    try:
        await scenario(path)
    except pytest.skip.Exception as skipped:
        return f"skipped: {skipped.msg}"
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return f"failed: {type(exc).__name__} at {Path(last.filename).name}:{last.lineno}"
    return "recovered"


async def run_fault_scenarios(quick: bool) -> dict[str, float]:
    """Run the flood and every fault scenario; the figures `benchmarks/chaos.py` reports."""
    logger = logging.getLogger()
    if not logger.handlers:  # the scenarios' failures are expected: not on stderr (they
        logger.addHandler(logging.NullHandler())  # check their own log lines)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="chaos-faults-") as tmp:
        root = Path(tmp)
        size = (40, 5, 2.0) if quick else (200, 10, 20.0)
        (root / "flood").mkdir()
        result = await flood(
            root / "flood", threads=size[0], per_thread=size[1], seconds=size[2], channels=10
        )
        figures |= result.figures()
        outcomes: dict[str, str] = {}
        for name, scenario in _scenarios(quick).items():
            outcomes[name] = await _try(name, scenario, root)
            print(f"  {name:<34}{outcomes[name]}", flush=True)
    tried = [o for o in outcomes.values() if not o.startswith("skipped")]
    figures["faults_tried"] = float(len(tried))
    figures["faults_recovered"] = float(sum(o == "recovered" for o in tried))
    figures["faults_skipped"] = float(len(outcomes) - len(tried))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a small flood and two faults")
    args = parser.parse_args()
    print(
        f"conditions: python {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}, {'quick' if args.quick else 'full'} run, "
        f"uid {os.geteuid()} (a small tmpfs needs root)"
    )
    started = time.monotonic()
    print("fault scenarios:")
    figures = asyncio.run(run_fault_scenarios(args.quick))
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(f"\n{'figure':<30}{'value':>12}")
    for name, value in figures.items():
        print(f"{name:<30}{value:>12g}")
    out: dict[str, Any] = {"benchmark": "chaos_faults", "quick": args.quick, **figures}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
