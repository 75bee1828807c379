"""Running a bash command's processes: knowing when it exits, and ending everything it started.

Owns: `kill_tree` (SIGTERM the process group and every descendant found in /proc, a short grace,
then SIGKILL, even if cancelled meanwhile), `ExitWatch` (the exit seen even while something the
command started still holds its pipe), `wait_exit` (an exit or the run's stop, whichever comes
first), and per-command containment: `command_cgroup` and `probe_containment`. `BashTool`
(tools.bash) decides when each is used.

Must not: import anything of ours outside `core` and `tools.sandbox*`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Literal

from core.tools import ToolContext
from tools.sandbox import probe_pid_namespace
from tools.sandbox_cgroup import CommandCgroup, pids_cgroup_parent

KILL_GRACE_S = 2.0


def descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc (empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain anything; fields follow the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal_tree(pgid: int, pids: set[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def kill_tree(pid: int, exited: asyncio.Event, *, grace: float) -> None:
    """SIGTERM the command's group and descendants, wait up to `grace`, then SIGKILL them all.
    The SIGKILL is sent even if this is cancelled while waiting."""
    pids = descendants(pid)
    try:
        if grace > 0:
            _signal_tree(pid, pids, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(exited.wait(), grace)
    finally:
        _signal_tree(pid, pids | descendants(pid), signal.SIGKILL)


class ExitWatch(asyncio.subprocess.SubprocessStreamProtocol):
    """Knows when the process exits, even while something it started still holds the pipe
    (`Process.wait` on Python 3.11 waits for the pipe too)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


def probe_containment(*, cgroup: bool = True, pid_namespace: bool = True) -> bool:
    """Whether commands outside the sandbox can be kept from outliving themselves here (a pids
    cgroup or a PID namespace). Blocking the first time, then cached: call it in a thread at
    start-up so that building the tool's description later does not wait."""
    return (cgroup and pids_cgroup_parent() is not None) or (
        pid_namespace and probe_pid_namespace() is not None
    )


def command_cgroup(max_processes: int) -> CommandCgroup | None:
    """A fresh pids cgroup for one command, or None where this host gives us none. Blocking."""
    parent = pids_cgroup_parent()
    return CommandCgroup.create(parent, max_processes) if parent is not None else None


async def wait_exit(exited: asyncio.Event, ctx: ToolContext) -> Literal["exited", "stopped"]:
    done_exit = asyncio.ensure_future(exited.wait())
    done_stop = asyncio.ensure_future(ctx.signal.wait())
    try:
        await asyncio.wait({done_exit, done_stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        done_exit.cancel()
        done_stop.cancel()
    return "exited" if exited.is_set() else "stopped"
