"""bash: output, exit codes, time limits, process trees and the sandbox."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.tools import ToolContext, ToolError, ToolResult
from tests.tools.conftest import make_ctx, text_of
from tools.bash import BashParams, BashTool, SandboxStatus, probe_sandbox

SANDBOX = probe_sandbox()
UNSANDBOXED = SandboxStatus(False, None, "turned off for this test")
needs_sandbox = pytest.mark.skipif(
    not SANDBOX.available, reason=f"bubblewrap is not usable here: {SANDBOX.reason}"
)
MODES = [
    pytest.param(UNSANDBOXED, id="unsandboxed"),
    pytest.param(SANDBOX, id="sandboxed", marks=needs_sandbox),
]


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def unique_sleep() -> tuple[str, str]:
    """A `sleep` argument no other process on the machine has."""
    marker = f"1000.{secrets.randbelow(10**9):09d}"
    return marker, f"sleep {marker}"


async def run(tool: BashTool, workspace: Path, command: str, **kw: float) -> ToolResult:
    return await tool.execute("call-1", BashParams(command=command, **kw), make_ctx(workspace))


@pytest.mark.parametrize("sandbox", MODES)
async def test_runs_in_the_workspace_and_returns_output(
    workspace: Path, sandbox: SandboxStatus
) -> None:
    (workspace / "hello.txt").write_text("hi there\n")
    result = await run(BashTool(sandbox=sandbox), workspace, "pwd; cat hello.txt; echo err >&2")
    assert text_of(result) == f"{workspace}\nhi there\nerr\n"
    assert result.details["exit_code"] == 0
    assert result.details["mode"] == sandbox.mode


@pytest.mark.parametrize("sandbox", MODES)
async def test_nonzero_exit_is_an_error_with_the_code(
    workspace: Path, sandbox: SandboxStatus
) -> None:
    with pytest.raises(ToolError) as caught:
        await run(BashTool(sandbox=sandbox), workspace, "echo before; exit 7")
    assert "before" in caught.value.message and "exited with code 7" in caught.value.message
    assert caught.value.details["exit_code"] == 7


@pytest.mark.parametrize("sandbox", MODES)
async def test_timeout_kills_the_whole_tree(workspace: Path, sandbox: SandboxStatus) -> None:
    marker, sleeper = unique_sleep()
    with pytest.raises(ToolError) as caught:
        await run(
            BashTool(sandbox=sandbox), workspace, f"{sleeper} & echo started; wait", timeout=1
        )
    assert "timed out after 1 s" in caught.value.message and "started" in caught.value.message
    assert caught.value.details["timed_out"] is True
    assert processes_with(marker) == []


@pytest.mark.parametrize("sandbox", MODES)
async def test_cancel_kills_the_whole_tree(workspace: Path, sandbox: SandboxStatus) -> None:
    marker, sleeper = unique_sleep()
    started = asyncio.Event()

    def on_update(partial: ToolResult) -> None:
        if "started" in text_of(partial):
            started.set()

    ctx = ToolContext(call_id="c", workspace=workspace, on_update=on_update)
    tool = BashTool(sandbox=sandbox, update_interval_s=0)
    task = asyncio.create_task(
        tool.execute("c", BashParams(command=f"{sleeper} & echo started; wait"), ctx)
    )
    await asyncio.wait_for(started.wait(), 10)
    assert processes_with(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_with(marker) == []


async def test_background_jobs_do_not_outlive_the_command(workspace: Path) -> None:
    marker, sleeper = unique_sleep()
    result = await run(BashTool(sandbox=UNSANDBOXED), workspace, f"{sleeper} & echo done")
    assert text_of(result) == "done\n"
    assert processes_with(marker) == []


async def test_long_output_shows_the_tail_and_saves_the_rest(workspace: Path) -> None:
    result = await run(BashTool(sandbox=UNSANDBOXED), workspace, "seq 1 5000")
    body, notice = text_of(result).rsplit("\n\n", 1)
    assert body.split("\n") == [str(i) for i in range(3001, 5001)]
    saved = result.details["full_output_path"]
    assert saved == ".teammate/bash-output/call-1.log" and saved in notice
    assert (workspace / saved).read_text() == "".join(f"{i}\n" for i in range(1, 5001))


async def test_huge_output_is_bounded_by_bytes(workspace: Path) -> None:
    command = (
        "python3 -c \"import sys; [sys.stdout.write('z' * 999 + '\\n') for _ in range(3000)]\""
    )
    result = await run(BashTool(sandbox=UNSANDBOXED), workspace, command)
    body, _ = text_of(result).rsplit("\n\n", 1)
    assert len(body.encode()) <= 50 * 1024 and body.split("\n") == ["z" * 999] * 51
    assert (workspace / result.details["full_output_path"]).stat().st_size == 3000 * 1000


async def test_output_streams_through_on_update(workspace: Path) -> None:
    updates: list[str] = []
    ctx = ToolContext(
        call_id="c", workspace=workspace, on_update=lambda r: updates.append(text_of(r))
    )
    tool = BashTool(sandbox=UNSANDBOXED, update_interval_s=0)
    await tool.execute("c", BashParams(command="echo one; sleep 0.2; echo two"), ctx)
    assert updates[0] == "one\n" and updates[-1] == "one\ntwo\n"


async def test_secrets_in_the_environment_are_not_passed_on(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    result = await run(BashTool(sandbox=UNSANDBOXED), workspace, "env")
    assert "xoxb-secret" not in text_of(result) and f"HOME={workspace}" in text_of(result)


def test_description_says_which_mode() -> None:
    assert "Mode: unsandboxed" in BashTool(sandbox=UNSANDBOXED).spec().description
    sandboxed = SandboxStatus(True, "/usr/bin/bwrap", "bubblewrap works")
    assert "Mode: sandboxed" in BashTool(sandbox=sandboxed).spec().description
    assert BashTool(sandbox=UNSANDBOXED).summarize(BashParams(command="ls -la")) == "Run `ls -la`"


async def test_required_sandbox_refuses_when_unavailable(workspace: Path) -> None:
    tool = BashTool(sandbox=UNSANDBOXED, require_sandbox=True)
    with pytest.raises(ToolError, match="only in a sandbox"):
        await run(tool, workspace, "true")


# -- the sandbox ---------------------------------------------------------------------------


@pytest.fixture
def outside_sentinels(tmp_path: Path) -> Iterator[list[Path]]:
    """Sentinel files outside the workspace: one beside it under /tmp, one in /var/tmp."""
    beside = tmp_path / "outside" / "sentinel.txt"
    beside.parent.mkdir()
    beside.write_text("SENTINEL-BESIDE")
    far_dir = Path(tempfile.mkdtemp(prefix="teammate-test-", dir="/var/tmp"))
    far = far_dir / "sentinel.txt"
    far.write_text("SENTINEL-FAR")
    try:
        yield [beside, far]
    finally:
        far.unlink(missing_ok=True)
        far_dir.rmdir()


@needs_sandbox
async def test_sandbox_cannot_read_or_write_outside(
    workspace: Path, outside_sentinels: list[Path]
) -> None:
    tool = BashTool(sandbox=SANDBOX)
    for sentinel in outside_sentinels:
        with pytest.raises(ToolError) as caught:
            await run(tool, workspace, f"cat {sentinel}")
        assert "SENTINEL" not in caught.value.message
        with pytest.raises(ToolError):
            await run(tool, workspace, f"echo changed > {sentinel}")
        assert sentinel.read_text().startswith("SENTINEL")
    with pytest.raises(ToolError):
        await run(tool, workspace, "touch /usr/teammate-sandbox-test")
    assert not await asyncio.to_thread(os.path.exists, "/usr/teammate-sandbox-test")
    await run(tool, workspace, "echo inside > made-inside.txt")
    assert (workspace / "made-inside.txt").read_text() == "inside\n"


@needs_sandbox
async def test_sandbox_hides_host_secrets_even_from_root(workspace: Path) -> None:
    if not await asyncio.to_thread(os.path.isfile, "/etc/shadow"):
        pytest.skip("this machine has no /etc/shadow")
    tool = BashTool(sandbox=SANDBOX)
    command = (
        "(cat /etc/shadow || echo DENIED) 2>&1; echo SSH $(ls -A /etc/ssh 2>/dev/null | wc -l)"
    )
    shown = text_of(await run(tool, workspace, command))
    assert "root:" not in shown and "DENIED" in shown
    assert "SSH 0" in shown
    # Everything else in /etc a command needs is still there.
    assert "root" in text_of(await run(tool, workspace, "head -1 /etc/passwd"))


@needs_sandbox
async def test_sandbox_has_no_network(workspace: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    probe = (
        'python3 -c "import socket; '
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
        "print('CONNECTED')\""
    )
    try:
        unsandboxed = await run(BashTool(sandbox=UNSANDBOXED), workspace, probe)
        assert "CONNECTED" in text_of(unsandboxed)  # the probe itself works
        with pytest.raises(ToolError) as caught:
            await run(BashTool(sandbox=SANDBOX), workspace, probe)
        assert "CONNECTED" not in caught.value.message
    finally:
        listener.close()
