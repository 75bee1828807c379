"""End to end: a run's own sandboxed `bash` swaps a workspace directory for a symlink to a host
directory while the same tool batch runs grep, read, ls and find in parallel (the agent loop
runs the calls of one reply concurrently). No result may carry host-only data, nothing
outside may change. Real loop, real tools, ScriptedModel; needs a working bubblewrap. On the
resolve-then-reopen-by-name tools this leaked host files in most runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.events import MessageEnd
from core.loop import AgentContext, LoopConfig, run_agent
from core.messages import Text, ToolResultMessage, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AnyTool
from tools.bash import BashTool, probe_sandbox
from tools.files import FindTool, LsTool, ReadTool
from tools.grep import GrepTool

SANDBOX = probe_sandbox()
pytestmark = pytest.mark.skipif(
    not SANDBOX.available, reason=f"bubblewrap is not usable here: {SANDBOX.reason}"
)

SENTINEL = "HOST-ONLY-SENTINEL"
TURNS = 8
DIRS = 20
FILES = 40


def _swap_script(outside: Path, rounds: int) -> str:
    # Inside the sandbox the host path means nothing; on the host, a tool following the link
    # would land in `outside`. That is the attack.
    return (
        f"for i in $(seq {rounds}); do mv d .parked && ln -s {outside} d; "
        "rm -f d; mv .parked d; done; echo swapped"
    )


def _batch(outside: Path) -> Reply:
    calls = [call("bash", {"command": _swap_script(outside, 60), "timeout": 60})]
    grep = {"pattern": "SENTINEL|inside", "path": "d", "limit": 1000}  # walk the whole tree
    calls += [call("grep", grep) for _ in range(4)]
    calls += [
        call("read", {"path": "d/sub/secret.txt"}),
        call("ls", {"path": "d/sub"}),
        call("find", {"pattern": "*", "path": "d"}),
    ]  # no write: it is a sequential tool, and the batch would no longer run in parallel
    return Reply(tool_calls=calls)


async def test_sandboxed_bash_racing_parallel_file_tools_leaks_nothing(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "host-only"
    # The same shape inside and outside, so that a walk that wanders out finds something.
    # Enough files that a walk is still going when the swapping starts.
    for base, content in ((outside, SENTINEL), (workspace / "d", "inside")):
        for j in range(DIRS):
            (base / f"sub{j:02d}").mkdir(parents=True)
            for i in range(FILES):
                (base / f"sub{j:02d}" / f"f{i:02d}.txt").write_text(content + "\n")
        (base / "sub").mkdir()
        (base / "sub" / "secret.txt").write_text(content + "\n")
    (outside / f"{SENTINEL}.txt").write_text(SENTINEL)
    before = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))

    model = ScriptedModel([*(_batch(outside) for _ in range(TURNS)), Reply(text="done")])
    tools: list[AnyTool] = [
        BashTool(sandbox=SANDBOX),
        # The Python engine: its walk is the slowest, so most of it overlaps the swapping
        # (bubblewrap takes a moment to start); ripgrep's is raced in test_races.py.
        GrepTool(engine="python"),
        ReadTool(),
        LsTool(),
        FindTool(),
    ]
    context = AgentContext(system_prompt="test", messages=[UserMessage(content="go")], tools=tools)
    results: list[ToolResultMessage] = []
    async for event in run_agent(context, model, config=LoopConfig(workspace=workspace)):
        if isinstance(event, MessageEnd) and isinstance(event.message, ToolResultMessage):
            results.append(event.message)

    assert len(results) == TURNS * 8
    bash_outputs = [r for r in results if r.tool_name == "bash"]
    assert all("swapped" in _text(r) for r in bash_outputs), [_text(r) for r in bash_outputs]
    leaked = [_text(r) for r in results if SENTINEL in _text(r)]
    assert not leaked, f"{len(leaked)} results carried host-only data: {leaked[0][:200]}"
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == before
    assert (outside / "sub" / "secret.txt").read_text() == SENTINEL + "\n"


def _text(result: ToolResultMessage) -> str:
    return "".join(part.text for part in result.content if isinstance(part, Text))
