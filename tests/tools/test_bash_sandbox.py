"""The bash sandbox under attack: what a hostile command (running as root or not) must not do.

Each test runs the attack from inside the sandbox and then checks the host, not just the
command's exit status."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.tools import ToolError, ToolResult
from tests.tools.conftest import make_ctx, text_of
from tests.tools.test_bash import processes_with
from tools.bash import BashParams, BashTool, SandboxLimits, probe_sandbox
from tools.sandbox_cgroup import pids_cgroup_parent

SANDBOX = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not SANDBOX.available, reason=f"bubblewrap is not usable here: {SANDBOX.reason}"
)


async def run(tool: BashTool, workspace: Path, command: str) -> str:
    """The command's output, whether it succeeded or not."""
    try:
        result: ToolResult = await tool.execute(
            "call-1", BashParams(command=command), make_ctx(workspace)
        )
    except ToolError as exc:
        return exc.message
    return text_of(result)


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory outside /tmp (so no tmpfs hides it), holding a sentinel file."""
    path = Path(tempfile.mkdtemp(prefix="teammate-test-ro-", dir="/var/tmp"))
    (path / "sentinel.txt").write_text("HOST")
    try:
        yield path
    finally:
        (path / "sentinel.txt").unlink(missing_ok=True)
        for leftover in path.iterdir():
            leftover.unlink()
        path.rmdir()


async def test_commands_run_unprivileged(workspace: Path) -> None:
    shown = await run(BashTool(sandbox=SANDBOX), workspace, "id -u; grep CapEff /proc/self/status")
    uid, caps = shown.split("\n")[:2]
    assert uid != "0"
    assert caps.split()[-1] == "0000000000000000"


async def test_a_read_only_bind_cannot_be_remounted_writable(
    workspace: Path, host_dir: Path
) -> None:
    tool = BashTool(sandbox=SANDBOX, extra_ro_paths=[str(host_dir)])
    sentinel = host_dir / "sentinel.txt"
    assert await run(tool, workspace, f"cat {sentinel}") == "HOST"  # it is visible
    attack = (
        f"mount -o remount,bind,rw {host_dir}; echo CHANGED > {sentinel}; "
        # The same again in a fresh user namespace, where the command would hold every capability.
        f"unshare -Urm sh -c 'mount -o remount,bind,rw {host_dir}; echo CHANGED > {sentinel}'; "
        f"echo NEW > {host_dir}/new.txt; true"
    )
    await run(tool, workspace, attack)
    assert sentinel.read_text() == "HOST"
    assert not (host_dir / "new.txt").exists()


async def test_a_masked_file_cannot_be_unmounted(workspace: Path) -> None:
    if not await asyncio.to_thread(os.path.isfile, "/etc/shadow"):
        pytest.skip("this machine has no /etc/shadow")
    attack = (
        "umount /etc/shadow; umount -l /etc/shadow; "
        "unshare -Urm sh -c 'umount /etc/shadow; cat /etc/shadow'; cat /etc/shadow; true"
    )
    shown = await run(BashTool(sandbox=SANDBOX), workspace, attack)
    assert "root:" not in shown


async def test_device_nodes_cannot_be_made(workspace: Path) -> None:
    attack = "mknod /tmp/mem c 1 1 && echo MADE-TMP; mknod ./mem c 1 1 && echo MADE-WS; true"
    shown = await run(BashTool(sandbox=SANDBOX), workspace, attack)
    assert "MADE" not in shown
    assert not (workspace / "mem").exists()


PTRACE_SIBLING = r"""
import ctypes, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
sibling = subprocess.Popen(["sleep", "30"])
PTRACE_ATTACH = 16
result = libc.ptrace(PTRACE_ATTACH, sibling.pid, None, None)
print("ATTACHED" if result == 0 else f"DENIED errno={ctypes.get_errno()}")
sibling.kill()
"""

RAW_SOCKET = r"""
import socket
for family, kind, proto in [
    (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    (socket.AF_PACKET, socket.SOCK_RAW, 0),
]:
    try:
        socket.socket(family, kind, proto)
        print("RAW-OPENED")
    except OSError as exc:
        print("DENIED", exc.errno)
"""


async def test_a_sibling_process_cannot_be_traced(workspace: Path) -> None:
    (workspace / "attach.py").write_text(PTRACE_SIBLING)
    shown = await run(BashTool(sandbox=SANDBOX), workspace, "python3 attach.py")
    assert "DENIED" in shown and "ATTACHED" not in shown


async def test_raw_sockets_cannot_be_opened(workspace: Path) -> None:
    (workspace / "raw.py").write_text(RAW_SOCKET)
    shown = await run(BashTool(sandbox=SANDBOX), workspace, "python3 raw.py")
    assert shown.count("DENIED") == 2 and "RAW-OPENED" not in shown


async def test_read_only_paths_under_tmp_stay_visible(workspace: Path, tmp_path: Path) -> None:
    # The sandbox's fresh /tmp must be mounted first, or it hides every read-only path under it.
    shared = tmp_path / "toolchain"
    shared.mkdir()
    (shared / "tool.txt").write_text("TOOL")
    tool = BashTool(sandbox=SANDBOX, extra_ro_paths=[str(shared)])
    shown = await run(tool, workspace, f"cat {shared}/tool.txt; echo CHANGED > {shared}/tool.txt")
    assert shown.startswith("TOOL")
    assert (shared / "tool.txt").read_text() == "TOOL"


# -- limits (small ones: these run on shared machines) --------------------------------------

MIB = 1024 * 1024
SMALL = SandboxLimits(
    max_processes=24, memory_bytes=256 * MIB, file_size_bytes=4 * MIB, tmp_size_bytes=8 * MIB
)

FORK_BOMB = r"""
import os, time
made = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        made += 1
except OSError as exc:
    print("FORK-REFUSED", exc.errno)
print("FORKED", made)
"""


async def test_a_fork_bomb_is_bounded_and_said_so(workspace: Path) -> None:
    (workspace / "bomb.py").write_text(FORK_BOMB)
    shown = await run(BashTool(sandbox=SANDBOX, limits=SMALL), workspace, "python3 bomb.py")
    assert "FORK-REFUSED" in shown
    forked = int(shown.split("FORKED ")[1].split()[0])
    assert forked < SMALL.max_processes
    if pids_cgroup_parent() is not None:  # only a cgroup tells us the limit was the cause
        assert "limit of 24 processes" in shown


async def test_the_classic_fork_bomb_ends_and_leaves_nothing(workspace: Path) -> None:
    marker = f"bomb-{secrets.token_hex(8)}"
    command = f"bomb() {{ bomb | bomb & }}; bomb; sleep 1 # {marker}"
    await run(BashTool(sandbox=SANDBOX, limits=SMALL), workspace, command)
    assert processes_with(marker) == []


async def test_tmp_and_dev_shm_are_capped(workspace: Path) -> None:
    tool = BashTool(sandbox=SANDBOX, limits=SMALL)
    for place in ("/tmp", "/dev/shm"):
        shown = await run(
            tool, workspace, f"for i in 1 2 3 4; do head -c 3000000 /dev/zero > {place}/f$i; done"
        )
        assert "No space left on device" in shown, place


async def test_dev_and_masked_directories_are_read_only(workspace: Path) -> None:
    command = "touch /dev/x && echo WROTE-DEV; touch /etc/ssh/x && echo WROTE-SSH; true"
    shown = await run(BashTool(sandbox=SANDBOX, limits=SMALL), workspace, command)
    assert "WROTE" not in shown


async def test_a_file_past_the_size_cap_cannot_be_written(workspace: Path) -> None:
    tool = BashTool(sandbox=SANDBOX, limits=SMALL)
    shown = await run(tool, workspace, "head -c 6000000 /dev/zero > big.bin")
    assert "File size limit exceeded" in shown
    assert (workspace / "big.bin").stat().st_size == 4 * MIB


async def test_memory_past_the_cap_cannot_be_allocated(workspace: Path) -> None:
    command = "python3 -c \"b = bytearray(400 * 1024 * 1024); print('ALLOCATED')\""
    shown = await run(BashTool(sandbox=SANDBOX, limits=SMALL), workspace, command)
    assert "MemoryError" in shown and "ALLOCATED" not in shown
    small = "python3 -c \"b = bytearray(64 * 1024 * 1024); print('ALLOCATED')\""
    assert "ALLOCATED" in await run(BashTool(sandbox=SANDBOX, limits=SMALL), workspace, small)
