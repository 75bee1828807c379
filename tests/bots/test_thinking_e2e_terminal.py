"""`teammate ask` on the default model, whose replies carry signed thinking, keeps answering a
conversation after the channel's memory, its instructions and the deployment's prompt changed.

The bug report, reproduced as it was written: after `remember`, the next `ask` in the same
conversation exited 1 with the API's 400 ("The block is bound to a different conversation").
Real processes (`python -m bots.cli`) against the fake Messages API, which binds thinking to its
prefix as the API does.
"""

from __future__ import annotations

from pathlib import Path

from tests.bots.test_cli import cli_env, teammate
from tests.bots.thinking_e2e import (
    CONTEXT_OPEN,
    answer,
    assert_appended,
    assert_never_refused,
    fake_messages_api,
    guards,
    last_user_text,
    message_requests,
    model_env,
    replays_thinking,
    tool_call,
)


async def test_ask_answers_after_remember_and_after_the_configuration_changes(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    async with fake_messages_api() as fake:
        env = cli_env(tmp_path, data_dir, None, **model_env(fake))
        fake.add(
            tool_call(
                "remember", {"note": "We deploy on Tuesdays."}, call_id="toolu_r1", signature="s1"
            ),
            answer("Noted: you deploy on Tuesdays.", "s2"),
        )
        first = await teammate(
            "ask", "-c", "x", "remember that we deploy on Tuesdays", env=env, cwd=tmp_path
        )
        assert first.code == 0, first.err
        assert first.out == "Noted: you deploy on Tuesdays.\n"

        # The question that used to exit 1 with the 400.
        fake.add(answer("On Tuesdays.", "s3"))
        second = await teammate(
            "ask", "-c", "x", "on which day do we deploy?", env=env, cwd=tmp_path
        )
        assert second.code == 0, second.err
        assert second.out == "On Tuesdays.\n"

        # The configuration file changes: the deployment's own prompt (in the system prompt
        # of every conversation) and this channel's instructions (appended as a note).
        config = tmp_path / "teammate.toml"
        config.write_text(
            'system_prompt = "You work for Acme."\n'
            '[channels."terminal:x"]\nsystem_prompt = "Answer in one sentence."\n'
        )
        fake.add(answer("For Acme, and the retro is on Fridays.", "s4"))
        third = await teammate(
            "ask",
            "-c",
            "x",
            "who do you work for, and when is the retro?",
            env=env | {"TEAMMATE_CONFIG": str(config)},
            cwd=tmp_path,
        )
        assert third.code == 0, third.err
        assert third.out == "For Acme, and the retro is on Fridays.\n"

    assert_never_refused(fake)
    requests = message_requests(fake)
    assert len(requests) == 4
    remembered, after_tool, asked, reconfigured = requests
    # The memory is appended as a context note: every earlier message is sent again
    # unchanged, so no guard is needed (no beta header, no block_binding).
    assert guards(fake) == [False, False, False, True]
    assert_appended(after_tool, asked)
    assert CONTEXT_OPEN in last_user_text(asked)
    assert "We deploy on Tuesdays." in last_user_text(asked)
    assert "We deploy on Tuesdays." not in str(asked.body["system"])
    assert remembered.body["system"] == asked.body["system"]
    assert all(replays_thinking(asked, s) for s in ("s1", "s2"))
    # The deployment's prompt is in the system prompt: the earlier thinking lost its prefix,
    # and the request asked for it to be dropped rather than be refused. The channel's
    # instructions came as a note, not into the system prompt.
    assert "You work for Acme." in str(reconfigured.body["system"])
    assert "Answer in one sentence." in last_user_text(reconfigured)
    assert "Answer in one sentence." not in str(reconfigured.body["system"])
    assert fake.dropped_thinking > 0
