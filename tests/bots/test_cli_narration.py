"""Issue 29 in the terminal: on the 5.5 models a reply's progress text comes as thinking.
`teammate chat` as people run it (a subprocess, the real `anthropic` SDK on FakeAnthropic):
stderr shows that text as a line before the tool's, stdout the answer once; the answer's own
thinking is never printed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.bots.narration_script import ANSWER, HIDDEN, NARRATION, script_deploy_log
from tests.bots.test_cli import KEY, cli_env, teammate
from tests.fakes.anthropic_server import FakeAnthropic


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=KEY)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def test_chat_prints_thinking_narration_before_the_tool_and_the_answer_once(
    anthropic: FakeAnthropic, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    workspace = tmp_path  # a terminal conversation works where the command is started
    (workspace / "deploy.log").write_text("02:14 no space left on device\n")
    script_deploy_log(anthropic, "read", ['{"path": ', '"deploy.log"}'])

    done = await teammate(
        "chat",
        env=cli_env(tmp_path, data_dir, anthropic),  # the default model, claude-sonnet-5-5
        cwd=tmp_path,
        stdin="why did the deploy fail?\n",
    )

    assert done.code == 0, done.err
    assert done.out == f"{ANSWER}\n"
    lines = done.err.splitlines()
    narrated = lines.index(NARRATION)  # stderr is a pipe here: a plain line
    assert lines[narrated + 1] == "⚙ Read deploy.log"
    assert lines[narrated + 2].startswith("  ✓ read ")
    assert HIDDEN not in done.out + done.err
    assert anthropic.remaining == 0
