"""The sandbox probe cannot turn the sandbox tests off unnoticed (issue 23, "Tests that would not
notice"): the sandboxed `bash` tests are skipped when `probe_sandbox()` says bubblewrap is
unusable, so a broken probe (dropping the seccomp descriptor it passes, leaving out the filter
real commands use) would silently skip about twenty tests while bash ran unsandboxed or was
refused. Here, bubblewrap is asked directly, with the plainest sandbox there is: where that
works, the probe must say so too, and a real sandboxed command must run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.tools import ToolResult
from tests.tools.conftest import make_ctx, text_of
from tools.bash import BashParams, BashTool, probe_sandbox

BWRAP = shutil.which("bwrap")


def plain_bwrap_works() -> bool:
    """bubblewrap's own smallest sandbox, with none of Teammate's options."""
    assert BWRAP is not None
    done = subprocess.run(
        [BWRAP, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.returncode == 0


def test_in_ci_bubblewrap_is_there_to_be_probed() -> None:
    # CI installs it (scripts/setup): without it, every sandbox test would be skipped.
    if not os.environ.get("CI"):
        pytest.skip("outside CI, bubblewrap may be missing on purpose")
    assert BWRAP is not None, "scripts/setup installs bubblewrap for CI"


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed")
async def test_where_bubblewrap_works_the_probe_says_so_and_a_command_runs(
    workspace: Path,
) -> None:
    if not plain_bwrap_works():
        pytest.skip("bubblewrap itself cannot make a sandbox here (namespaces forbidden)")
    status = probe_sandbox()
    assert status.available, f"bubblewrap works here, but the probe says: {status.reason}"
    tool = BashTool(sandbox=status, require_sandbox=True)
    result: ToolResult = await tool.execute(
        "call-1",
        BashParams(command="echo inside; ls /proc | grep -cE '^[0-9]+$'"),
        make_ctx(workspace),
    )
    inside, processes = text_of(result).split()[:2]
    assert inside == "inside"
    assert int(processes) <= 5  # its own PID namespace: bwrap, bash and ls, not the host's
