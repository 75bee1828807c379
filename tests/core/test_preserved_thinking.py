"""Preserved thinking, end to end: the real `anthropic` SDK over 127.0.0.1 against a fake Messages
API that binds every thinking block it streams to its prefix, as the API does on the 5.5 models.

What a team would notice: a conversation whose earlier reasoning was produced before a change
(system prompt, tools, an older message) keeps answering instead of failing with the same 400
forever; an unchanged conversation is sent exactly as before (no beta header, nothing dropped).
The fake's own strictness is proved first: the request the adapter used to send is refused.
"""

from __future__ import annotations

import anthropic
import pytest

from core.messages import AssistantMessage, Message, Text, Thinking, ToolResultMessage, UserMessage
from core.models.anthropic import AnthropicModel, RetryPolicy
from core.models.base import ModelRequest, StreamEnd, ToolSpec
from core.models.thinking_binding import BINDING_BETA, BlockDigests, frame_digest, prefix_chain
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    TextOut,
    ThinkingOut,
    ToolUseOut,
    sse,
)

API_KEY = "sk-ant-api03-test-key-binding"
SYSTEM = "You are Teammate."
TOOL = ToolSpec(name="ls", description="List files.", input_schema={"type": "object"})
OTHER_TOOL = ToolSpec(name="read", description="Read a file.", input_schema={"type": "object"})


def make_model(
    client: anthropic.AsyncAnthropic, model_id: str = "claude-sonnet-5-5"
) -> AnthropicModel:
    async def no_wait(_delay: float) -> None:
        return None

    return AnthropicModel(model_id, client=client, retry=RetryPolicy(max_retries=2, sleep=no_wait))


async def reply_to(
    model: AnthropicModel, messages: list[Message], *, system: str = SYSTEM, tools: list[ToolSpec]
) -> AssistantMessage:
    request = ModelRequest(system_prompt=system, messages=list(messages), tools=tools)
    final = None
    async for event in model.stream(request):
        if isinstance(event, StreamEnd):
            final = event.message
    assert final is not None
    return final


async def a_thread_with_reasoning(
    fake: FakeAnthropic, model: AnthropicModel, *, tools: list[ToolSpec]
) -> list[Message]:
    """Two answers, each reasoned (signed thinking, then a tool call, then text): the history
    a real thread on the default model has after a couple of questions."""
    fake.add(
        sse(
            ThinkingOut("List first.", "sig-a"),
            ToolUseOut("t1", "ls", ["{}"]),
            stop_reason="tool_use",
        ),
        sse(ThinkingOut("Two files.", "sig-b"), TextOut("There are two files.")),
    )
    history: list[Message] = [UserMessage(content="[Ada] what is here?")]
    first = await reply_to(model, history, tools=tools)
    history += [
        first,
        ToolResultMessage(tool_call_id="t1", tool_name="ls", content=[Text(text="a.txt\nb.txt")]),
    ]
    second = await reply_to(model, history, tools=tools)
    assert second.stop_reason == "stop", second.error_message
    return [*history, second]


async def test_the_fake_refuses_replayed_thinking_after_its_prefix_changed(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # The rule the API enforces, shown without the adapter: what used to be sent fails.
    model = make_model(client)
    history = await a_thread_with_reasoning(fake, model, tools=[TOOL])
    converted, _ = model._api_messages([*history, UserMessage(content="[Ada] and now?")])
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            system=[{"type": "text", "text": SYSTEM + " Memory: deploys on Tuesdays."}],
            messages=converted,  # type: ignore[arg-type]
        )
    assert "bound to a different conversation" in str(refused.value)
    # drop_block without the beta header is refused too: the header must arrive.
    with pytest.raises(anthropic.BadRequestError) as no_header:
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            system=[{"type": "text", "text": "changed"}],
            messages=converted,  # type: ignore[arg-type]
            thinking={
                "type": "adaptive",
                "block_binding": {"prefix_mismatch_behavior": "drop_block"},
            },  # type: ignore[typeddict-unknown-key]
        )
    assert BINDING_BETA in str(no_header.value)


async def test_an_unchanged_conversation_is_replayed_as_is_without_the_guard(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    model = make_model(client)
    history = await a_thread_with_reasoning(fake, model, tools=[TOOL])
    # Append-only: a new question, then the channel's memory appended as a note.
    history += [
        UserMessage(content="[Ada] when do we deploy?"),
        UserMessage(
            content="<channel-context>\n#1: Deploys happen on Tuesdays.\n</channel-context>"
        ),
    ]
    fake.add(sse(ThinkingOut("Memory says Tuesday.", "sig-c"), TextOut("On Tuesdays.")))
    answer = await reply_to(model, history, tools=[TOOL])

    assert answer.text() == "On Tuesdays."
    assert fake.dropped_thinking == 0
    assert not any("anthropic-beta" in r.headers for r in fake.requests)
    assert all("block_binding" not in r.body.get("thinking", {}) for r in fake.requests)
    # The display of thinking is asked for: the text between tool calls comes inside it.
    assert fake.bodies[-1]["thinking"] == {"type": "adaptive", "display": "summarized"}


@pytest.mark.parametrize(
    "change", ["system prompt", "tool list", "compaction", "stored before digests"]
)
async def test_a_change_that_cannot_be_appended_is_guarded_and_the_conversation_answers(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, change: str
) -> None:
    model = make_model(client)
    history = await a_thread_with_reasoning(fake, model, tools=[TOOL])
    system, tools = SYSTEM, [TOOL]
    if change == "system prompt":
        system = SYSTEM + " Answer in French."
    elif change == "tool list":
        tools = [TOOL, OTHER_TOOL]  # an MCP server's list_changed, a config narrowing
    elif change == "compaction":
        # Older turns replaced by a summary; the latest answer (with its thinking) kept.
        history = [
            UserMessage(content="<conversation-summary>Ada asked.</conversation-summary>"),
            *history[-1:],
        ]
    else:
        for message in history:
            if isinstance(message, AssistantMessage):
                message.prefix_digest = None
    fake.add(sse(ThinkingOut("Fine.", "sig-d"), TextOut("Still here.")))
    answer = await reply_to(
        model, [*history, UserMessage(content="[Ada] still there?")], system=system, tools=tools
    )

    assert answer.stop_reason == "stop", answer.error_message
    assert answer.text() == "Still here."
    last = fake.requests[-1]
    assert last.headers["anthropic-beta"] == BINDING_BETA
    assert last.body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    if change != "stored before digests":  # those blocks were still valid: nothing to drop
        assert fake.dropped_thinking >= 1
    assert len(fake.requests) == 3  # answered at once: no refused request first


async def test_after_a_guarded_change_later_answers_keep_their_reasoning(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # The guard stays on while the changed history is there (the API does not remember it),
    # and the reasoning produced after the change stays valid: only the stale blocks drop.
    model = make_model(client)
    history = await a_thread_with_reasoning(fake, model, tools=[TOOL])
    tools = [TOOL, OTHER_TOOL]
    fake.add(sse(ThinkingOut("New tool.", "sig-e"), TextOut("ok")))
    history += [UserMessage(content="[Ada] q3")]
    history += [await reply_to(model, history, tools=tools)]
    dropped_once = fake.dropped_thinking
    fake.add(sse(ThinkingOut("Again.", "sig-f"), TextOut("ok again")))
    history += [UserMessage(content="[Ada] q4")]
    answer = await reply_to(model, history, tools=tools)

    assert answer.text() == "ok again"
    assert fake.requests[-1].headers["anthropic-beta"] == BINDING_BETA
    assert fake.dropped_thinking - dropped_once == dropped_once  # the same stale ones, no more


async def test_a_refusal_the_digests_did_not_foresee_is_retried_once_with_the_guard(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # Should the API see a change the digests cannot (the digests say "unchanged"), the same
    # history would fail forever: the adapter asks for drop_block at once, and says so.
    model = make_model(client)
    history = await a_thread_with_reasoning(fake, model, tools=[TOOL])
    history[0] = UserMessage(content="[Ada] what is here? (edited)")
    messages = [*history, UserMessage(content="[Ada] next")]
    # Make every recorded digest agree with the edited history, as if the edit were invisible.
    converted, recorded = model._api_messages(messages)
    frame = frame_digest(
        [{"type": "text", "text": SYSTEM}],
        [{"name": "ls", "description": "List files.", "input_schema": {"type": "object"}}],
    )
    chain = prefix_chain(frame, converted, BlockDigests())
    replies = [m for m in messages if isinstance(m, AssistantMessage)]
    for message, index in zip(replies, sorted(recorded), strict=True):
        message.prefix_digest = chain[index]
    fake.add(sse(TextOut("Recovered.")))
    answer = await reply_to(model, messages, tools=[TOOL])

    assert answer.text() == "Recovered.", answer.error_message
    refused, retried = fake.requests[-2:]
    assert "anthropic-beta" not in refused.headers
    assert retried.headers["anthropic-beta"] == BINDING_BETA


async def test_models_without_preserved_thinking_never_get_the_guard(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    model = make_model(client, "claude-sonnet-4-6")
    fake.add(sse(ThinkingOut("hm", "sig-x"), TextOut("one")), sse(TextOut("two")))
    history: list[Message] = [UserMessage(content="[Ada] q1")]
    history += [await reply_to(model, history, tools=[TOOL])]
    history += [UserMessage(content="[Ada] q2")]
    answer = await reply_to(model, history, system="changed", tools=[OTHER_TOOL])

    assert answer.text() == "two"
    assert not any("anthropic-beta" in r.headers for r in fake.requests)
    assert fake.bodies[-1]["thinking"] == {"type": "adaptive"}  # its display is shown by default


async def test_the_digest_ignores_moving_cache_breakpoints_and_sees_every_content_change() -> None:
    frame = frame_digest(
        [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}], []
    )
    assert frame == frame_digest([{"type": "text", "text": "s"}], [])
    base = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    marked = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    digests = BlockDigests()
    assert prefix_chain(frame, base, digests) == prefix_chain(frame, marked, digests)
    edited = [{"role": "user", "content": [{"type": "text", "text": "hi!"}]}]
    assert prefix_chain(frame, base, digests)[1] != prefix_chain(frame, edited, digests)[1]
    assert prefix_chain(frame, base, digests)[0] == prefix_chain(frame, edited, digests)[0]
    as_assistant = [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]
    assert prefix_chain(frame, base, digests)[1] != prefix_chain(frame, as_assistant, digests)[1]


async def test_a_reply_records_the_digest_of_the_request_it_answered(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    model = make_model(client)
    fake.add(sse(ThinkingOut("x", "sig-1"), TextOut("y")))
    history: list[Message] = [UserMessage(content="[Ada] q")]
    reply = await reply_to(model, history, tools=[TOOL])
    assert reply.prefix_digest is not None and reply.prefix_digest.startswith("v1:")
    # Stored and loaded again, it still says the same (it is part of the message).
    assert AssistantMessage.model_validate_json(reply.model_dump_json()).prefix_digest == (
        reply.prefix_digest
    )
    assert isinstance(reply.content[0], Thinking)


def test_remembered_block_digests_are_bounded_by_the_bytes_they_keep_alive() -> None:
    digests = BlockDigests(max_entries=100, max_bytes=10_000)
    blocks = [{"type": "text", "text": f"{n}" + "x" * 3_000} for n in range(10)]
    for block in blocks:
        digests.digest(block)
    assert digests.bytes_kept <= 10_000 and len(digests) == 3  # the newest three
    again = {"type": "text", "text": "0" + "x" * 3_000}  # equal content, another object
    assert digests.digest(again) == digests.digest(blocks[0])
    marked = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    assert digests.digest(marked) == digests.digest(blocks[-1])  # a breakpoint is not content
