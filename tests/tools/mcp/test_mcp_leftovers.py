"""A stdio MCP server ends with Teammate on every path: its start timing out, the stop being
cancelled again, `teammate mcp list` exiting, and Teammate being SIGKILLed (the server runs in
a session of its own, so no terminal signal reaches it, and `--hang-on-start` never reads the
end of its input)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from tests import processes
from tests.bots.test_cli import cli_env, data_dir, teammate
from tests.tools.mcp.conftest import REPO, START_GUARD_S, server_toml, stdio_command
from tests.waiting import eventually
from tools.mcp_stdio import StdioProcess, stdio_transport

__all__ = ["data_dir"]  # fixtures

pytestmark = pytest.mark.skipif(
    not processes.adopt_orphans(), reason="finding orphaned processes needs Linux"
)

STUCK = "--hang-on-start"


def stuck_servers() -> set[int]:
    """The `--hang-on-start` servers this test process started, orphaned or not (adopted)."""
    return {pid for pid in processes.descendants() if STUCK in processes.command_line(pid)}


def gone(pid: int) -> bool:
    return not processes.still_running({pid}, grace_s=5.0)


async def test_a_stop_cancelled_again_during_its_grace_still_kills_the_server() -> None:
    # A start that times out stops the server (stdin closed, a short grace, then the kill);
    # the caller giving up on it then cancels that stop once more. The kill used to come after
    # the grace's await, so the second cancel skipped it and the server ran on.
    info = StdioProcess()

    async def use() -> None:
        command = stdio_command(STUCK)
        env = dict(os.environ)
        async with stdio_transport(command, env=env, cwd=str(REPO), process_info=info):
            await asyncio.sleep(3600)

    task = asyncio.create_task(use())
    await eventually("the server to start", lambda: info.pid is not None, START_GUARD_S)
    assert info.pid is not None
    task.cancel()  # the stop begins
    await asyncio.sleep(0.2)  # inside the stop's grace (0.5 s)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert gone(info.pid), processes.describe({info.pid})


async def test_mcp_list_leaves_no_server_that_did_not_start_running(
    tmp_path: Path, data_dir: Path
) -> None:
    stuck = server_toml("stuck", stdio_command(STUCK), "start_timeout_s = 1")
    config = tmp_path / "teammate.toml"
    config.write_text(stuck)
    env = cli_env(tmp_path, data_dir, None, TEAMMATE_CONFIG=str(config))

    listed = await teammate("--model", "scripted", "mcp", "list", env=env, cwd=tmp_path)

    assert listed.code == 1, listed.out + listed.err
    assert "stuck (stdio): did not start" in listed.out
    assert not processes.still_running(stuck_servers(), grace_s=5.0), processes.describe(
        stuck_servers()
    )


async def test_a_server_ends_when_teammate_is_killed(tmp_path: Path, data_dir: Path) -> None:
    stuck = server_toml("stuck", stdio_command(STUCK), "start_timeout_s = 100")
    config = tmp_path / "teammate.toml"
    config.write_text(stuck)
    env = cli_env(tmp_path, data_dir, None, TEAMMATE_CONFIG=str(config))
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bots.cli", "--model", "scripted", "mcp", "list",
        cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await eventually(
            "teammate to start the server", lambda: bool(stuck_servers()), START_GUARD_S
        )
        [server] = stuck_servers()
    finally:
        with contextlib.suppress(ProcessLookupError):
            cli.send_signal(signal.SIGKILL)
        await cli.wait()

    assert gone(server), processes.describe({server})
