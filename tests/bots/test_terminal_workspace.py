"""A terminal conversation's tools work where the command was started, or in `--workspace DIR`
(issue 28, "Newcomer"): the README's `teammate ask -c review "what changed in src/?"` gave the
model a fresh, empty directory under the data dir, so it saw no `src/`. The real CLI against
the fake Messages API; what the model's `ls` returned is read from the request that followed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bots.test_cli import cli_env, fake, teammate  # noqa: F401 (the fake fixture)
from tests.fakes.anthropic_server import FakeAnthropic, ToolUseOut, sse, text_reply


def script_ls(fake: FakeAnthropic) -> None:  # noqa: F811
    fake.add(
        sse(ToolUseOut("toolu_ls", "ls", ['{"path": "src"}']), stop_reason="tool_use"),
        text_reply("src/ holds main.py."),
    )


def tool_result_text(fake: FakeAnthropic) -> str:  # noqa: F811
    last = fake.bodies[-1]["messages"]
    return json.dumps([m for m in last if m["role"] == "user"][-1])


@pytest.mark.parametrize("given", [False, True])
async def test_ask_works_in_its_own_directory_or_the_one_given(
    fake: FakeAnthropic,  # noqa: F811
    tmp_path: Path,
    given: bool,
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    script_ls(fake)
    env = cli_env(tmp_path, tmp_path / "data", fake)
    args = ["ask", "-c", "review", "what changed in src/?"]
    if given:
        done = await teammate(*args, "--workspace", str(project), env=env, cwd=tmp_path)
    else:
        done = await teammate(*args, env=env, cwd=project)
    assert done.code == 0, done.err
    assert "src/ holds main.py." in done.out
    assert "main.py" in tool_result_text(fake)


async def test_a_workspace_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    env = cli_env(tmp_path, tmp_path / "data", None, TEAMMATE_MODEL="scripted")
    done = await teammate("ask", "hi", "--workspace", str(tmp_path / "nope"), env=env, cwd=tmp_path)
    assert done.code != 0 and "is not a directory" in done.err
