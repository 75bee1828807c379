"""The keyless demo, end to end (issue 28, "Newcomer without an API key"): a fresh
`teammate --model demo chat` lists, reads and greps the files where it was started and
remembers a note, through the real runner, store and tools — showing tool activity, labelled
as a demo, costing nothing; and the next question sees the note."""

from __future__ import annotations

from pathlib import Path

from core.messages import AssistantMessage, ToolResultMessage, UserMessage
from core.models.base import ModelRequest, ToolSpec
from core.models.demo import CAN_DO, LABEL, demo_reply
from tests.bots.test_cli import cli_env, teammate

SESSION = (
    "list the files\n"
    "read notes.md\n"
    "search for deploy\n"
    "remember that we deploy on Tuesdays\n"
    "/usage\n"
)


async def test_a_first_demo_session_lists_reads_greps_and_remembers(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.md").write_text("# Notes\nWe deploy from main.\n")
    (project / "app.py").write_text("print('deploy')\n")
    env = cli_env(tmp_path, tmp_path / "data", None, TEAMMATE_MODEL="demo")
    done = await teammate("chat", env=env, cwd=project, stdin=SESSION)
    assert done.code == 0, done.err
    err, out = done.err, done.out
    # Tool activity on stderr, as with a real model.
    for line in ("⚙ ", "✓ ls", "✓ read", "✓ grep", "✓ remember"):
        assert line in err, err
    # Answers from the tools' own results, labelled.
    assert out.count(LABEL) >= 3
    assert "notes.md" in out and "We deploy from main." in out and "app.py" in out
    assert "Remembered as #1: we deploy on Tuesdays" in out
    assert "$0.0000" in err  # /usage: it costs nothing
    # The note is kept: a new conversation in the same place sees it.
    again = await teammate("ask", "hello", env=env, cwd=project)
    assert again.code == 0, again.err
    assert CAN_DO.split(":")[0] in again.out


def test_it_says_what_it_can_do_and_never_calls_a_tool_the_run_lacks() -> None:
    ask = UserMessage(content="[Ada (U1) · 2026-12-04 10:00 UTC]\nlist the files please")
    none = demo_reply(ModelRequest(system_prompt="", messages=[ask]))
    assert none.tool_calls == [] and none.text == LABEL + CAN_DO
    ls = ToolSpec(name="ls", description="List.", input_schema={"type": "object"})
    listed = demo_reply(ModelRequest(system_prompt="", messages=[ask], tools=[ls]))
    assert [c.name for c in listed.tool_calls] == ["ls"]
    reply = AssistantMessage(content=list(listed.tool_calls), stop_reason="tool_use")
    result = ToolResultMessage(tool_call_id=listed.tool_calls[0].id, tool_name="ls", content=[])
    history = [ask, reply, result]
    answered = demo_reply(ModelRequest(system_prompt="", messages=history, tools=[ls]))
    assert answered.tool_calls == [] and "`ls` says" in answered.text
