"""The processes a test run started, found from /proc: what `tests/conftest.py` checks after
each test and at the end of the session, and what tests about leftovers assert on.

The test process makes itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a process
whose parent died (a server left behind by a `teammate` subprocess that exited or was killed)
is then adopted by the test process instead of init, so every process the run started, orphan
or not, is a descendant of it. A zombie (exited, not yet reaped) is not counted: it runs
nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Set as AbstractSet
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants; False where that is impossible."""
    if sys.platform != "linux":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of `pid`, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain anything: split after the last one.
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), fields[0]


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def descendants(root: int | None = None, *, known: AbstractSet[int] = frozenset()) -> set[int]:
    """The live (not zombie) processes below `root` (default: this process) that are not in
    `known` nor below one of those: what a long-lived process (a PostgreSQL server a fixture
    keeps) starts for itself is its business, not a test's."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        found = _stat(int(entry))
        if found is not None:
            children.setdefault(found[0], []).append(int(entry))
            states[int(entry)] = found[1]
    below: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid in below or pid in known:
            continue
        below.add(pid)
        todo.extend(children.get(pid, []))
    return {pid for pid in below if states.get(pid) != "Z"}


def still_running(pids: set[int], grace_s: float) -> set[int]:
    """Those of `pids` still running (not zombies) after up to `grace_s`: a process being
    stopped right now is given a moment."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = {pid for pid in pids if (found := _stat(pid)) is not None and found[1] != "Z"}
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def describe(pids: set[int]) -> str:
    return "\n".join(f"  pid {pid}: {command_line(pid)}" for pid in sorted(pids))


def kill(pids: set[int]) -> None:
    """SIGKILL `pids` and their process groups (what a leftover started dies with it)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def reap_adopted() -> None:
    """Reap the zombies of processes this one adopted (call only when no child of ours is
    still waited for: it may take an exit status someone else waits for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
