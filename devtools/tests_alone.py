"""`python -m devtools.tests_alone`: every test file passes when run alone.

The suite runs in one pytest process, where a test can pass only because another one ran
before it (a module imported, a global set, a fixture's side effect). This runs test files one
by one, each in its own fresh `pytest` process, and fails if any of them fails alone.

Running all of them takes long, so CI runs a sample: `--sample N` files chosen by `--seed S`,
the same files for the same seed and the same list of test files (the default seed is the
checkout's commit, so each commit tries other files and a failure is reproduced with the seed it
prints). The files known to take long alone are left out of the sample (`SLOW`, with their time
and why); `--all` runs every file, those too. Each file has `--timeout` seconds; one that runs
longer is killed and counted as failed.

A test known to fail alone is listed in `KNOWN_FAILING` with the reason: its failure is
reported but does not fail the check, and it failing no more fails it (so the entry is removed).
Nothing else is skipped. The unit is the file: a test that fails only when it is the one test
run (`pytest FILE::TEST`) while its file passes alone is not caught here.

Prints one line per file (`ok`/`FAILED`/`TIMEOUT`, seconds), the failing tests' lines from
pytest's summary, and a last line with the totals; exits 1 on any failure, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Test files left out of the sample (not of `--all`) because they take long alone: the seconds
# each took alone on the 2-core machine, loaded (2026-12, all 137 files passed alone in 25 min).
# They still run in full in scripts/test; the sample's files took 1.5-24 s (6.4 s on average).
SLOW: dict[str, str] = {
    "tests/bots/platforms/discord/test_cli_discord.py": "50 s alone: starts the CLI",
    "tests/bots/platforms/slack/test_e2e_conversations.py": "34 s alone: end to end",
    "tests/bots/platforms/slack/test_e2e_lifecycle.py": "26 s alone: end to end",
    "tests/bots/platforms/slack/test_e2e_scale_out.py": "158 s alone: several instances",
    "tests/bots/test_cli.py": "84 s alone: starts the CLI",
    "tests/bots/test_cli_serve.py": "75 s alone: starts `teammate serve`",
    "tests/bots/test_doctor_models.py": "27 s alone",
    "tests/bots/test_runner_pinned.py": "34 s alone",
    "tests/chaos/test_crash_anywhere.py": "40 s alone: crashes child processes",
    "tests/test_benchmarks.py": "131 s alone: the benchmarks",
    "tests/tools/mcp/test_mcp_cli.py": "46 s alone: starts MCP servers",
}

# Tests known to fail when their file runs alone (node id -> why, and who is on it).
KNOWN_FAILING: dict[str, str] = {}

DEFAULT_SAMPLE = 10  # about a minute on a 2-core machine, at most about three
DEFAULT_TIMEOUT = 300.0


@dataclass
class Outcome:
    path: str
    status: str  # "ok", "FAILED", "TIMEOUT"
    seconds: float
    failed: list[str] = field(default_factory=list)  # node ids from pytest's summary
    tail: list[str] = field(default_factory=list)  # last lines of output, when no node ids


def all_test_files(root: Path = ROOT) -> list[str]:
    """Every test file under tests/, as a path relative to the root, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in (root / "tests").rglob("test_*.py"))


def choose(files: Sequence[str], n: int, seed: str) -> list[str]:
    """`n` of `files` (all of them if fewer), the same for the same seed; in path order."""
    pool = sorted(files)
    if n >= len(pool):
        return pool
    return sorted(random.Random(seed).sample(pool, n))


def default_seed(root: Path = ROOT) -> str:
    """The checkout's commit (short), or "0" outside git."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "0"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "0"


_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+?)(?: - .*)?$")


def failed_tests(output: str) -> list[str]:
    """The node ids pytest's short summary (`-ra`) names as failed or errored."""
    found: list[str] = []
    for line in output.splitlines():
        match = _SUMMARY.match(line.strip())
        if match and match.group(2) not in found:
            found.append(match.group(2))
    return found


def run_alone(path: str, timeout: float, root: Path = ROOT) -> Outcome:
    """Run one test file in its own pytest process."""
    command = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", path]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # so a timeout kills the tests' own subprocesses too
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        output, _ = process.communicate()
        seconds = time.monotonic() - started
        return Outcome(path, "TIMEOUT", seconds, failed_tests(output), _tail(output))
    finally:
        _kill_group(process)  # whatever the tests left running
    seconds = time.monotonic() - started
    if process.returncode == 0:
        return Outcome(path, "ok", seconds)
    failed = failed_tests(output)
    return Outcome(path, "FAILED", seconds, failed, [] if failed else _tail(output))


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _tail(output: str, lines: int = 15) -> list[str]:
    return output.rstrip().splitlines()[-lines:]


def judge(outcome: Outcome, known: dict[str, str]) -> tuple[bool, list[str]]:
    """Whether the outcome passes the check, and the lines to print about it."""
    head = f"{outcome.status:7} {outcome.seconds:6.1f}s  {outcome.path}"
    notes: list[str] = []
    known_here = {node for node in known if node.split("::", 1)[0] == outcome.path}
    if outcome.status == "TIMEOUT":
        notes = [f"    killed after {outcome.seconds:.0f}s (--timeout)"]
        notes += [f"    {line}" for line in outcome.tail]
        return False, [head, *notes]
    unexpected = [node for node in outcome.failed if node not in known_here]
    expected = [node for node in outcome.failed if node in known_here]
    fixed = sorted(known_here - set(outcome.failed))
    notes += [f"    FAILED alone: {node}" for node in unexpected]
    notes += [f"    known to fail alone: {node} ({known[node]})" for node in expected]
    notes += [
        f"    passes alone now: {node}: remove it from KNOWN_FAILING in devtools/tests_alone.py"
        for node in fixed
    ]
    if outcome.status == "FAILED" and not outcome.failed:
        notes += ["    failed without naming a test; the end of its output:"]
        notes += [f"    {line}" for line in outcome.tail]
        return False, [head, *notes]
    ok = not unexpected and not fixed
    if outcome.status == "FAILED" and ok:
        head = f"{'ok':7} {outcome.seconds:6.1f}s  {outcome.path}"
    return ok, [head, *notes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.tests_alone",
        description="Run test files one by one, each in its own pytest process.",
    )
    parser.add_argument("files", nargs="*", help="test files to run (default: a sample)")
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, metavar="N")
    parser.add_argument("--seed", default=None, metavar="S", help="default: the commit")
    parser.add_argument("--all", action="store_true", help="every test file, the slow ones too")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS")
    parser.add_argument("--list", action="store_true", help="print the files and stop")
    args = parser.parse_args(argv)
    if args.sample < 1 or args.timeout <= 0:
        parser.error("--sample and --timeout must be positive")

    every = all_test_files()
    if args.files:
        missing = [f for f in args.files if not (ROOT / f).is_file()]
        if missing:
            parser.error(f"no such test file: {', '.join(missing)}")
        chosen = list(args.files)
        how = f"{len(chosen)} given"
    elif args.all:
        chosen = every
        how = f"all {len(every)}"
    else:
        seed = args.seed if args.seed is not None else default_seed()
        chosen = choose([f for f in every if f not in SLOW], args.sample, seed)
        how = f"{len(chosen)} of {len(every) - len(SLOW)} (seed {seed}; {len(SLOW)} slow left out)"
    if args.list:
        print("\n".join(chosen))
        return 0

    print(f"tests alone: {how}, each in its own pytest process", flush=True)
    started = time.monotonic()
    failures: list[str] = []
    for path in chosen:
        ok, lines = judge(run_alone(path, args.timeout), KNOWN_FAILING)
        print("\n".join(lines), flush=True)
        if not ok:
            failures.append(path)
    total = time.monotonic() - started
    if failures:
        print(
            f"tests alone: {len(failures)} of {len(chosen)} files failed alone "
            f"({total:.0f}s): {' '.join(failures)}"
        )
        return 1
    print(f"tests alone: {len(chosen)} files pass alone ({total:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
