"""A run on a 5.5 model whose progress text comes as thinking (issue 29), for the platforms'
end-to-end tests: the real `AnthropicModel` on FakeAnthropic, which streams the replies below.

First reply: summarized thinking ("Checking the deploy log.") and a tool call, no text block;
second: thinking of its own (never shown: it belongs to the final answer) and the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anthropic

from core.models.anthropic import AnthropicModel
from tests.fakes.anthropic_server import FakeAnthropic, TextOut, ThinkingOut, ToolUseOut, sse

API_KEY = "sk-ant-api03-narration-test"
MODEL_ID = "claude-sonnet-5-5"
NARRATION = "Checking the deploy log."
HIDDEN = "The log says the disk filled up; say so plainly."
ANSWER = "The deploy failed: the disk was full."


def script_deploy_log(fake: FakeAnthropic, tool: str, arguments_json: list[str]) -> None:
    """The two replies of the run: `tool` is called with `arguments_json` (chunks)."""
    fake.add(
        sse(
            ThinkingOut(NARRATION, "sig-narration"),
            ToolUseOut("toolu_deploy", tool, arguments_json),
            stop_reason="tool_use",
        ),
        sse(ThinkingOut(HIDDEN, "sig-answer"), TextOut(ANSWER)),
    )


@asynccontextmanager
async def anthropic_on_fake() -> AsyncIterator[tuple[FakeAnthropic, AnthropicModel]]:
    """FakeAnthropic, started, and the real adapter for the default model talking to it."""
    fake = FakeAnthropic(api_key=API_KEY)
    await fake.start()
    client = anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=fake.url, max_retries=0, _strict_response_validation=True
    )
    try:
        yield fake, AnthropicModel(MODEL_ID, client=client)
    finally:
        await client.close()
        await fake.close()
