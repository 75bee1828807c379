"""Child processes that end with the process that started them, even one killed with SIGKILL.

Owns: `ends_with_parent()`, a `preexec_fn` for `subprocess`/`asyncio` that asks the Linux
kernel to SIGKILL the child when its parent ends (`prctl(PR_SET_PDEATHSIG)`), and kills the
child at once if the parent already ended before it asked.

Why the kernel: a process killed with SIGKILL runs no code, so it cannot stop what it started;
a child in a session of its own (an MCP server) gets no terminal signal either, and one that
never reads the end of its input would run on without a parent.

The limit (the kernel's): the signal comes when the *thread* that started the child ends, not
the process. Teammate starts children from its event loop, which runs in the main thread for
the life of the process; a loop run in another thread takes its children with it when that
thread ends (nothing could talk to them afterwards anyway). A caller that must not depend on
its thread starts the child from a thread that lasts as long as the process. The child's own
children are not covered (they see the end of their input, as the child would).

Must not: import anything of ours.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

# Looked up here, in the parent: the child between fork and exec should do as little as it can.
_prctl: Callable[..., int] | None = (
    ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
)


def ends_with_parent() -> Callable[[], None] | None:
    """The `preexec_fn` that makes a child end with the calling thread's process (see the
    module); None where the kernel offers no such thing (not Linux)."""
    prctl = _prctl
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the request: too late for it
            os.kill(os.getpid(), signal.SIGKILL)

    return arm
