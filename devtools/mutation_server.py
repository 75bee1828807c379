"""A test runner for `devtools.mutation` that starts pytest in a forked child per mutant.

Importing pytest, pydantic, anthropic and the rest costs seconds of CPU per interpreter; a
mutant's own tests often cost less. This process imports everything once, forgets our own
packages (so each child imports the mutated file fresh from disk), and forks per request.
It has no threads, so forking is safe.

Protocol: one JSON request a line on stdin, `{"tests": [...], "limit_s": 60}`; one JSON answer
a line on stdout, `{"verdict": "killed" | "survived", "how": "..."}`. Run with the scratch copy
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
from pathlib import Path

OURS = ("core", "tools", "storage", "bots", "tests", "benchmarks", "devtools")
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider")


def preload(copy: Path) -> None:
    """Import what the tests import, then forget our modules and keep the third-party ones."""
    import pytest  # noqa: F401  (loaded for the children)

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


def run(tests: list[str], limit_s: float, log: Path) -> tuple[str, str]:
    pid = os.fork()
    if pid == 0:  # the child: its own session (so a hang is killed with all it started)
        code = 70
        try:
            os.setsid()
            output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(output, 1)
            os.dup2(output, 2)
            import pytest

            code = int(pytest.main([*PYTEST_ARGS, *tests]))
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
        verdict, how = run(list(request["tests"]), float(request["limit_s"]), log)
        print(json.dumps({"verdict": verdict, "how": how}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
