"""bash without the sandbox: what it started still ends with it, even when it left the process
tree (`setsid`, double forks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tests.tools.test_bash import processes_with, unique_sleep
from tools.bash import BashParams, BashTool, SandboxStatus

UNSANDBOXED = SandboxStatus(False, None, "turned off for this test")


async def test_a_setsid_child_does_not_outlive_the_command(workspace: Path) -> None:
    marker, sleeper = unique_sleep()
    tool = BashTool(sandbox=UNSANDBOXED)
    command = f"setsid {sleeper} > /dev/null 2>&1 < /dev/null & echo started"
    result = await tool.execute("c", BashParams(command=command), make_ctx(workspace))
    assert text_of(result) == "started\n"
    assert processes_with(marker) == []


async def test_a_double_forked_setsid_child_does_not_outlive_a_timeout(workspace: Path) -> None:
    marker, sleeper = unique_sleep()
    tool = BashTool(sandbox=UNSANDBOXED)
    command = f"(setsid sh -c '{sleeper}' > /dev/null 2>&1 < /dev/null &); echo started; sleep 30"
    with pytest.raises(ToolError, match="timed out"):
        await tool.execute("c", BashParams(command=command, timeout=1), make_ctx(workspace))
    assert processes_with(marker) == []


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(BashTool(sandbox=UNSANDBOXED, pid_namespace=False), id="cgroup"),
        pytest.param(BashTool(sandbox=UNSANDBOXED, process_cgroup=False), id="pid-namespace"),
    ],
)
async def test_each_way_of_containing_a_command_works_alone(
    workspace: Path, tool: BashTool
) -> None:
    if not tool.contained():
        pytest.skip("this host offers neither a pids cgroup nor a PID namespace to us")
    marker, sleeper = unique_sleep()
    command = f"(setsid sh -c '{sleeper}' > /dev/null 2>&1 < /dev/null &); echo started"
    result = await tool.execute("c", BashParams(command=command), make_ctx(workspace))
    assert text_of(result) == "started\n"
    assert processes_with(marker) == []


def test_the_description_says_plainly_when_nothing_contains_commands() -> None:
    bare = BashTool(sandbox=UNSANDBOXED, process_cgroup=False, pid_namespace=False)
    assert not bare.contained()
    assert "may keep running after the command ends" in bare.spec().description
    contained = BashTool(sandbox=UNSANDBOXED)
    if contained.contained():
        assert "may keep running" not in contained.spec().description
