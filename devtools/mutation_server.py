"""A test runner for `devtools.mutation` that starts pytest in a forked child per mutant.

Importing pytest, pydantic, anthropic and the rest costs seconds of CPU per interpreter; a
mutant's own tests often cost less. This process imports everything once, forgets our own
packages (so each child imports the mutated file fresh from disk), and forks per request.
It has no threads, so forking is safe.

Protocol: one JSON request a line on stdin, `{"tests": [...], "limit_s": 60, "per_test_s":
{node: 35.0}}`; one JSON answer a line on stdout, `{"verdict": "killed" | "survived", "how":
"..."}`. A test that outlives its own limit ends the child at once (a hang is a kill): without
it, a hung test would hold its worker until the whole request's limit, minutes on a line that
hundreds of tests run. Run with the scratch copy
as working directory and on PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

OURS = ("core", "tools", "storage", "bots", "tests", "benchmarks", "devtools")
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider")
TIMED_OUT = 71  # the child's exit code when one test outlived its limit


class PerTestLimit:
    """A pytest plugin: each test's whole protocol (setup, call, teardown) within its limit."""

    def __init__(self, limits: dict[str, float]) -> None:
        self.limits = limits
        self.running = ""
        self._log = os.dup(1)  # the child's log, before pytest captures the test's output

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        limit = self.limits.get(item.nodeid)
        self.running = item.nodeid
        if limit:
            signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _expired(self, _signum: int, _frame: object) -> None:
        limit = self.limits.get(self.running, 0.0)
        os.write(self._log, f"\nERROR timed out after {limit:.0f} s: {self.running}\n".encode())
        os._exit(TIMED_OUT)  # from a signal handler: no cleanup can hang


def preload(copy: Path) -> None:
    """Import what the tests import, then forget our modules and keep the third-party ones."""
    modules = [
        path
        for package in ("core", "tools", "storage", "bots")
        for path in sorted((copy / package).rglob("*.py"))
    ]
    # test modules and fakes only: helpers such as the crash children act when imported
    modules += sorted((copy / "tests").rglob("test_*.py"))
    modules += sorted((copy / "tests" / "fakes").glob("*.py"))
    for path in modules:
        name = ".".join(path.relative_to(copy).with_suffix("").parts).removesuffix(".__init__")
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    for name in list(sys.modules):
        if name.split(".", 1)[0] in OURS:
            del sys.modules[name]


def run(
    tests: list[str], limit_s: float, log: Path, per_test_s: dict[str, float] | None = None
) -> tuple[str, str]:
    pid = os.fork()
    if pid == 0:  # the child: its own session (so a hang is killed with all it started)
        code = 70
        try:
            os.setsid()
            output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(output, 1)
            os.dup2(output, 2)
            code = int(
                pytest.main([*PYTEST_ARGS, *tests], plugins=[PerTestLimit(per_test_s or {})])
            )
        finally:
            os._exit(code)
    deadline = time.monotonic() + limit_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "killed", f"timed out after {limit_s:.0f} s"
        time.sleep(0.02)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return "survived", "tests pass"
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    failed = [line for line in text.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return "killed", (failed[0] if failed else f"pytest exit {code}")[:160]


def main() -> int:
    copy = Path.cwd()
    preload(copy)
    log = copy / ".mutation-child.log"
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        per_test = {str(k): float(v) for k, v in dict(request.get("per_test_s", {})).items()}
        verdict, how = run(list(request["tests"]), float(request["limit_s"]), log, per_test)
        print(json.dumps({"verdict": verdict, "how": how}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
