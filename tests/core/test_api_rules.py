"""The Messages API's other rules, end to end through the real SDK against the strict fake: a
request the API would refuse is never sent, and a refusal is reported as what it is."""

from __future__ import annotations

import anthropic
import pytest

from core.messages import (
    AssistantMessage,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.anthropic import AnthropicModel, RetryPolicy
from core.models.base import ModelRequest, StreamEnd
from tests.fakes.anthropic_server import FakeAnthropic, error_reply, text_reply

API_KEY = "sk-ant-api03-test-key-rules"


def make(client: anthropic.AsyncAnthropic, model_id: str = "claude-sonnet-5-5") -> AnthropicModel:
    return AnthropicModel(model_id, client=client, retry=RetryPolicy(max_retries=0))


async def answer(model: AnthropicModel, *messages: Message) -> AssistantMessage:
    request = ModelRequest(system_prompt="You are Teammate.", messages=list(messages))
    ends = [e async for e in model.stream(request) if isinstance(e, StreamEnd)]
    return ends[0].message


async def test_whitespace_only_text_is_never_sent(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # The fake refuses it, as the API does...
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "text", "text": " \n "}]}],
        )
    assert "non-whitespace text" in str(refused.value)
    # ...and a history holding it (a tool that printed "\n", a stored whitespace reply, a
    # blank message) still goes through: those blocks are left out or stood in for.
    call = ToolCall(id="toolu_1", name="bash", arguments={"command": "echo"})
    history: list[Message] = [
        UserMessage(content="[Ada] run echo"),
        AssistantMessage(content=[Text(text="\n\n"), call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="toolu_1", tool_name="bash", content=[Text(text="\n")]),
        AssistantMessage(content=[Text(text="  ")]),
        UserMessage(content=[Text(text="\t")]),
    ]
    fake.add(text_reply("Done."))
    reply = await answer(make(client), *history)
    assert reply.stop_reason == "stop", reply.error_message
    sent = fake.bodies[-1]["messages"]
    texts = [
        block.get("text")
        for message in sent
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    assert all(text and text.strip() for text in texts)


async def test_a_413_is_reported_as_a_request_too_large_not_a_long_conversation(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.add(
        error_reply(
            413, "request_too_large", "Request exceeds the maximum allowed number of bytes."
        )
    )
    reply = await answer(make(client), UserMessage(content="[Ada] hi"))
    assert reply.stop_reason == "error"
    assert reply.error_kind == "invalid_request"  # compacting the text would not help
    assert "32 MB" in (reply.error_message or "")


async def test_input_and_max_tokens_over_the_window_is_an_overflow(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.add(
        error_reply(
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
        )
    )
    reply = await answer(make(client), UserMessage(content="[Ada] hi"))
    assert reply.error_kind == "context_overflow"  # the runner compacts and retries


async def test_an_unknown_model_id_is_a_404_people_can_act_on(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    reply = await answer(make(client, "claude-sonnet-9-9"), UserMessage(content="[Ada] hi"))
    assert reply.stop_reason == "error" and reply.error_kind == "invalid_request"
    assert "does not know this model" in (reply.error_message or "")
    assert "claude-sonnet-9-9" in (reply.error_message or "")
