"""Issue 28: how a slow run with tool calls reads in Slack once it is over. The real bolt app and
runner against FakeSlack, the thread read back in ts order as people see it: the tool activity
(what the model said it was doing, one attachment per call) first, then the answer, which is
only the answer: the narration written before and between the tool calls does not sit on top
of it, and nothing is shown twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from core.models.scripted import Reply, call
from tests.bots.platforms.slack.e2e_harness import message_event, running, texts
from tests.bots.platforms.slack.held_model import HeldModel
from tests.bots.platforms.slack.surface_script import (
    context_texts,
    has_feedback,
    has_stop,
    markdown_of,
)
from tests.fakes.gate_tool import GateTool
from tests.fakes.slack_server import FakeSlack

NARRATION = "Let me look at the deploy log first."
ANSWER = "The deploy failed because the disk of the build host was full."
Moment = Literal["narration-streamed", "activity-shown-first", "updated-message"]


def bot_replies(fake: FakeSlack, thread_ts: str) -> list[dict[str, Any]]:
    return fake.bot_replies("C1", thread_ts)  # in ts order, as Slack shows them


@pytest.mark.parametrize(
    "moment", ["narration-streamed", "activity-shown-first", "updated-message"]
)
async def test_a_slow_tool_run_shows_its_tool_activity_above_an_uncluttered_answer(
    fake_slack: FakeSlack, tmp_path: Path, moment: Moment
) -> None:
    if moment == "updated-message":
        fake_slack.streaming_error = "unknown_method"
    gate = GateTool()
    model = HeldModel(
        [
            Reply(text=NARRATION, tool_calls=[call("gate")], chunk_size=8),
            Reply(text=ANSWER, chunk_size=8),
        ]
    )
    narration_shown = model.hold_before_end(0)
    first_reply = model.hold_before(0)
    async with running(fake_slack, tmp_path, model, tools=[gate]) as app:
        event = message_event(fake_slack, "why did the deploy fail?")
        assert await app.event(event) == 200
        if moment == "activity-shown-first":
            # The model is slow to start: the in-progress message (Stop) comes first.
            await fake_slack.wait_for(
                lambda f: any(has_stop(m) for m in bot_replies(f, event["ts"])), 15
            )
        first_reply.set()
        # The narration shows while it is written (it may turn out to be the answer).
        await fake_slack.wait_for(lambda f: NARRATION in texts(bot_replies(f, event["ts"])), 10)
        narration_shown.set()
        await gate.entered.wait()
        await fake_slack.wait_for(
            lambda f: any(m.get("attachments") for m in bot_replies(f, event["ts"])), 10
        )
        gate.opened.set()
        await app.settle()

    replies = bot_replies(fake_slack, event["ts"])
    with_tools = [i for i, m in enumerate(replies) if m.get("attachments")]
    with_answer = [i for i, m in enumerate(replies) if ANSWER in texts([m])]
    assert len(with_tools) == 1 and len(with_answer) == 1, "each shown once"
    tools, answer = replies[with_tools[0]], replies[with_answer[0]]
    assert with_tools[0] < with_answer[0], "the tool activity is above the answer"
    assert "through" in texts(tools["attachments"])
    assert markdown_of(answer).strip() == ANSWER, "the answer is only the answer"
    assert [m for m in replies if NARRATION in texts([m])] == [tools], "narration once, above"
    assert any("Used 1 tool" in line for line in context_texts(tools))
    assert has_feedback(answer)
    assert not any(has_stop(m) for m in replies)
    assert not [m for m in replies if m.get("streaming") == "in_progress"]
    assert "white_check_mark" in fake_slack.reactions("C1", event["ts"])
