"""Which process owns a run, so crash recovery touches only the runs of dead processes.

Owns: `OWNER` (this process: host, pid and the pid's start time from `/proc`), and
`owner_alive`, which tells a live process sharing the database (a terminal beside a bot) from a
dead one or a reused pid.
"""

from __future__ import annotations

import os
import socket

INTERRUPTED_TEXT = (
    "My previous answer here was interrupted because Teammate restarted. "
    "Ask again if you still need it."
)


def process_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


OWNER: dict[str, object] = {
    "host": socket.gethostname(),
    "pid": os.getpid(),
    "start": process_start(os.getpid()),
}


def owner_alive(owner: dict[str, object]) -> bool:
    """True if `owner` is another live process (so its runs are not ours to recover)."""
    if not owner or owner == OWNER:
        return False  # unknown, or this very process (whose live runs it knows)
    if owner.get("host") != OWNER["host"]:
        return True  # another machine's run: not ours to judge
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, under another user
    start = owner.get("start")
    return start is None or process_start(pid) == start  # a reused pid is another process
