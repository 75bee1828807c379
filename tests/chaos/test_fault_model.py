"""Model outage (issue 13): the fake Anthropic API answers 529, 500, an error in the middle of
an HTTP 200 stream, or hangs. The assembled Slack app (real bolt app, runner, SQLite store,
ModelFactory and AnthropicModel) must show ONE clear message per affected answer (no silence,
no traceback), back off between retries, lose nothing, and answer normally after recovery."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.messages import UserMessage
from tests.chaos.fault_kit import FAST_RETRY, fake_anthropic, fake_slack, slack_app
from tests.fakes.anthropic_server import (
    JSONReply,
    Reply,
    SSEReply,
    error_event,
    error_reply,
    message_start,
    text_reply,
)

ATTEMPTS = FAST_RETRY.max_retries + 1


def _overloaded() -> JSONReply:
    return error_reply(529, "overloaded_error", "Overloaded")


def _server_error() -> JSONReply:
    return error_reply(500, "api_error", "Internal server error")


def _mid_stream_error() -> SSEReply:
    return SSEReply(
        events=[message_start(), ("ping", {"type": "ping"}), error_event("overloaded_error", "x")]
    )


def _hang_before_headers() -> SSEReply:
    return SSEReply(events=text_reply("never").events, hang_after=0, hang_s=120.0)


def _hang_mid_stream() -> SSEReply:
    return SSEReply(events=text_reply("never").events, hang_after=2, hang_s=120.0)


FAULTS: dict[str, tuple[Callable[[], Reply], str]] = {
    "529": (_overloaded, "overloaded"),
    "500": (_server_error, "internal error"),
    "mid-stream error": (_mid_stream_error, "overloaded"),
    "hang before headers": (_hang_before_headers, "couldn't reach the model"),
    "hang mid-stream": (_hang_mid_stream, "couldn't reach the model"),
}


def _visible(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_model_outage_shows_one_clear_message_backs_off_and_recovers(
    tmp_path: Path, fault: str
) -> None:
    make, expected = FAULTS[fault]
    async with fake_slack() as slack, fake_anthropic() as model_api:
        model_api.add(*(make() for _ in range(ATTEMPTS)))
        async with slack_app(slack, model_api, tmp_path) as app:
            ts = await app.mention("what is our deploy process?")
            await app.settle()
            failed = slack.bot_replies("C1", ts)

            # Retries stopped at the policy's count, and each waited at least its backoff.
            calls = [r for r in model_api.requests if r.path == "/v1/messages"]
            assert len(calls) == ATTEMPTS
            for n, (first, then) in enumerate(itertools.pairwise(calls)):
                floor = 0.75 * FAST_RETRY.initial_delay_s * 2**n  # the jitter's lower bound
                assert then.at - first.at >= floor, (n, then.at - first.at)

            # People see exactly one message, in plain words, with no traceback.
            shown = _visible(failed)
            assert len(failed) == 1, failed
            assert expected in shown.lower(), shown
            assert "Traceback" not in shown and "Error(" not in shown
            assert "x" in slack.reactions("C1", ts)

            # The question is in history: nothing was lost.
            conversation = await app.store.get_conversation(f"slack:T0FAKE:C1:{ts}")
            if conversation is None:  # the key's team is the fake's
                conversation = await app.store.get_conversation(f"slack:{slack.team_id}:C1:{ts}")
            assert conversation is not None
            loaded = await app.store.load(conversation.id)
            asked = [m.message for m in loaded.messages if isinstance(m.message, UserMessage)]
            assert any("deploy process" in m.text() for m in asked)

            # Recovery: the next message in the thread is answered normally.
            model_api.add(text_reply("Deploys go through the pipeline."))
            await app.mention("and now?", thread_ts=ts)
            await app.settle()
            after = slack.bot_replies("C1", ts)[len(failed) :]
            assert "Deploys go through the pipeline." in _visible(after)
            assert len(model_api.requests) == ATTEMPTS + 1
            last = model_api.requests[-1].body["messages"]
            assert "deploy process" in json.dumps(last)  # the failed question is still there
