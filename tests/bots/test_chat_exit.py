"""Piped input that ends with /exit is answered before Teammate leaves (issue 28, "Newcomer"):
`printf 'hi\\n/exit\\n' | teammate chat` printed no answer, and the message stayed queued to be
answered at the next start, out of context."""

from __future__ import annotations

from pathlib import Path

from tests.bots.test_cli import cli_env, teammate


async def test_piped_input_ending_in_exit_gets_its_answers_first(tmp_path: Path) -> None:
    env = cli_env(tmp_path, tmp_path / "data", None, TEAMMATE_MODEL="scripted")
    done = await teammate("chat", env=env, cwd=tmp_path, stdin="hi\nand this?\n/exit\n")
    assert done.code == 0, done.err
    assert done.out.count("This is the scripted model") == 2, done.out + done.err
    # Nothing left for the next start to answer out of context.
    again = await teammate("chat", env=env, cwd=tmp_path, stdin="/exit\n")
    assert "This is the scripted model" not in again.out
