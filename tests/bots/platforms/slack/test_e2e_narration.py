"""Issue 29 on Slack: on the 5.5 models a reply's progress text comes as thinking. The real bolt
app, runner and `AnthropicModel` (on FakeAnthropic) against FakeSlack: what Slack received shows
that text where narration goes (the in-progress message, with the tool's attachment, above the
answer; issue 28), before the tool's attachment, and the final answer once and alone; the final
answer's own thinking never."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bots.narration_script import (
    ANSWER,
    HIDDEN,
    NARRATION,
    anthropic_on_fake,
    script_deploy_log,
)
from tests.bots.platforms.slack.e2e_harness import EchoTool, message_event, running, texts
from tests.bots.platforms.slack.surface_script import markdown_of
from tests.fakes.slack_server import FakeSlack


def first_call_with(fake: FakeSlack, needle: str) -> int:
    """The index of the first Web API call that showed `needle` (a refused chat.*Stream call
    showed nothing)."""
    for index, call in enumerate(fake.calls):
        refused = call.method.endswith("Stream") and fake.streaming_error is not None
        if not refused and needle in json.dumps(call.args, ensure_ascii=False):
            return index
    raise AssertionError(f"no call carried {needle!r}")


@pytest.mark.parametrize("streaming", [True, False], ids=["native-stream", "updated-message"])
async def test_thinking_narration_shows_before_the_tools_and_the_answer_once(
    fake_slack: FakeSlack, tmp_path: Path, streaming: bool
) -> None:
    if not streaming:
        fake_slack.streaming_error = "unknown_method"
    async with anthropic_on_fake() as (anthropic, model):
        script_deploy_log(anthropic, "echo", ['{"text": ', '"deploy.log"}'])
        async with running(fake_slack, tmp_path, model, tools=[EchoTool()]) as app:
            event = message_event(fake_slack, "why did the deploy fail?")
            assert await app.event(event) == 200
            await app.settle()
        assert anthropic.remaining == 0

    replies = app.replies("C1", event["ts"])
    answer = [reply for reply in replies if ANSWER in markdown_of(reply)]
    assert len(answer) == 1, "the final answer is shown once"
    assert markdown_of(answer[0]).strip() == ANSWER, "the narration does not sit on top of it"
    showing = [reply for reply in replies if NARRATION in texts([reply])]
    assert len(showing) == 1, "the narration is shown once"
    assert "echo: deploy.log" in texts(showing[0].get("attachments", []))
    assert replies.index(showing[0]) < replies.index(answer[0]), "the activity above the answer"
    # Shown while it worked: before the tool's attachment, and long before the answer.
    assert first_call_with(fake_slack, NARRATION) <= first_call_with(fake_slack, "echo: deploy")
    assert first_call_with(fake_slack, NARRATION) < first_call_with(fake_slack, ANSWER)
    interim = fake_slack.calls[first_call_with(fake_slack, NARRATION)]
    assert interim.method == "chat.postMessage"  # the in-progress message, never the stream
    # The final answer's thinking is never shown, in any call.
    assert HIDDEN not in json.dumps([call.args for call in fake_slack.calls], ensure_ascii=False)
    assert "white_check_mark" in fake_slack.reactions("C1", event["ts"])
