"""Saved command output goes through the workspace's confined writer: a symlink planted where it
would be saved (by the command itself, or swapped in meanwhile by something else sharing the
workspace) never sends a write outside."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.tools import ToolResult
from tests.tools.conftest import make_ctx
from tools.bash import BashParams, BashTool, SandboxStatus, _Output

UNSANDBOXED = SandboxStatus(False, None, "turned off for this test")
LONG = "seq 1 3000"  # more than the 2000 lines shown: the full output is saved


async def long_run(tool: BashTool, workspace: Path, prefix: str = "") -> ToolResult:
    command = f"{prefix}{LONG}"
    return await tool.execute("call-1", BashParams(command=command), make_ctx(workspace))


def files_under(path: Path) -> list[Path]:
    return [Path(top) / name for top, _, names in os.walk(path) for name in names]


FLIP = """
import ctypes, os, sys
teammate, outside = sys.argv[1].encode(), sys.argv[2].encode()
swap = teammate + b"-link"
os.symlink(outside, swap)
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
print("flipping", flush=True)
while True:  # .teammate is, atomically, the real directory or a link outside; never absent
    if libc.renameat2(AT_FDCWD, teammate, AT_FDCWD, swap, RENAME_EXCHANGE) != 0:
        sys.exit(f"renameat2 failed: {os.strerror(ctypes.get_errno())}")
"""


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    (path / "bash-output").mkdir(parents=True)
    (path / "victim.log").write_text("HOST")
    return path


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param("ln -s {outside} .teammate", id="teammate-dir"),
        pytest.param(
            "mkdir -p .teammate && ln -s {outside}/bash-output .teammate/bash-output",
            id="output-dir",
        ),
        pytest.param(
            "mkdir -p .teammate/bash-output && "
            "ln -s {outside}/victim.log .teammate/bash-output/call-1.log",
            id="output-file",
        ),
    ],
)
async def test_a_link_planted_by_the_command_gets_no_write_outside(
    workspace: Path, outside: Path, plant: str
) -> None:
    result = await long_run(
        BashTool(sandbox=UNSANDBOXED), workspace, plant.format(outside=outside) + "; "
    )
    assert files_under(outside) == [outside / "victim.log"]
    assert (outside / "victim.log").read_text() == "HOST"
    saved = result.details["full_output_path"]
    if saved is not None:  # saved elsewhere inside, or not at all
        assert not await asyncio.to_thread((workspace / saved).is_symlink)
        assert str(await asyncio.to_thread(os.path.realpath, workspace / saved)).startswith(
            str(await asyncio.to_thread(os.path.realpath, workspace)) + "/"
        )


async def test_a_link_swapped_in_meanwhile_gets_no_write_outside(
    workspace: Path, outside: Path
) -> None:
    # Another thread of the channel (threads share the workspace) flips .teammate between the
    # real directory and a link outside while commands save their output.
    (workspace / ".teammate" / "bash-output").mkdir(parents=True)
    # A process of its own, not a thread: it flips while the bot holds the GIL.
    flipper = subprocess.Popen(  # noqa: ASYNC220 - started once, not waited on here
        [sys.executable, "-c", FLIP, str(workspace / ".teammate"), str(outside)],
        stdout=subprocess.PIPE,
    )
    assert flipper.stdout is not None
    await asyncio.to_thread(flipper.stdout.readline)  # flipping
    tool = BashTool(sandbox=UNSANDBOXED)
    output = _Output()
    await output.add(b"x" * 100_000)
    try:
        await long_run(tool, workspace)
        # Then many saves alone (what a command's end does), to give the swap every chance.
        for index in range(1000):
            await tool._save_full(f"call-{index}", workspace, output)
    finally:
        flipper.kill()
        await asyncio.to_thread(flipper.wait)
    assert flipper.returncode == -9  # it flipped until the end
    assert files_under(outside) == [outside / "victim.log"]
