"""Per-command pids cgroups: made, limited, emptied and removed; a dead bot's are cleaned up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.tools.conftest import make_ctx, text_of
from tools.bash import BashParams, BashTool, SandboxLimits, SandboxStatus
from tools.sandbox_cgroup import PREFIX, pids_cgroup_parent

PARENT = pids_cgroup_parent()
pytestmark = pytest.mark.skipif(PARENT is None, reason="no pids cgroup can be made here")
UNSANDBOXED = SandboxStatus(False, None, "turned off for this test")


def ours(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f"{PREFIX}{os.getpid()}-")]


async def test_a_command_runs_in_its_own_cgroup_which_is_removed_after(workspace: Path) -> None:
    assert PARENT is not None
    tool = BashTool(sandbox=UNSANDBOXED, limits=SandboxLimits(max_processes=50))
    command = "cat /proc/self/cgroup"
    shown = text_of(await tool.execute("c", BashParams(command=command), make_ctx(workspace)))
    assert f"{PREFIX}{os.getpid()}-" in shown
    assert ours(PARENT) == []


def test_cgroups_of_a_dead_bot_are_removed_and_a_live_bots_kept() -> None:
    assert PARENT is not None
    finished = subprocess.Popen(["true"])  # its pid no longer runs once waited for
    finished.wait()
    stale = PARENT / f"{PREFIX}{finished.pid}-1"
    live = PARENT / f"{PREFIX}{os.getpid()}-999999"
    stale.mkdir()
    live.mkdir()
    try:
        pids_cgroup_parent.cache_clear()
        assert pids_cgroup_parent() == PARENT
        assert not stale.exists() and live.exists()
    finally:
        for path in (stale, live):
            if path.exists():
                path.rmdir()
