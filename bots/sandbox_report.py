"""`teammate doctor`'s sandbox line: what `bash` will do here, said plainly.

Owns: the sandbox line of doctor (ok, warn or fail, and why). Must not: probe by itself (the
caller probes once, off the event loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from bots.settings import Settings
from tools.bash import SandboxStatus
from tools.toolset import bash_off_reason

Status = Literal["ok", "info", "warn", "fail"]


def report_sandbox(
    settings: Settings, sandbox: SandboxStatus, report: Callable[[Status, str, str], None]
) -> None:
    mode = settings.tools.bash.sandbox
    enabled = settings.tools.bash_enabled
    usage = "bash tool enabled" if enabled else "bash tool disabled"
    if enabled and mode == "off":
        report(
            "warn",
            "sandbox",
            'tools.bash.sandbox is "off": commands run unconfined and can read what the bot '
            "can (its tokens in /proc/<pid>/environ, the database, every channel's workspace); "
            'use "auto" or "required" unless every member of every channel may see all that',
        )
    elif sandbox.available:
        report("ok", "sandbox", f"{sandbox.reason} ({sandbox.bwrap}); {usage}")
    elif enabled and mode == "required":
        report("fail", "sandbox", f"{sandbox.reason}, but tools.bash.sandbox is 'required'")
    elif enabled:
        report("warn", "sandbox", bash_off_reason(sandbox))
    else:
        report("warn", "sandbox", f"{sandbox.reason}; {usage}")
