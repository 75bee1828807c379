"""AnthropicModel end to end: the real `anthropic` SDK over 127.0.0.1 against a fake Messages API.

Every test asserts on what a user would notice (the streamed reply, the error they are shown)
and on what the API received (cache breakpoints, replayed thinking, merged tool results).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, ClassVar

import anthropic
import pytest
from pydantic import BaseModel

from core.events import AgentEnd, AgentEvent, MessageUpdate, ToolExecutionEnd
from core.loop import AgentContext, run_agent
from core.messages import (
    AssistantMessage,
    Author,
    Image,
    Message,
    ProviderBlock,
    RedactedThinking,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.models.anthropic import AnthropicModel, ConversionCache, RetryPolicy
from core.models.base import (
    ModelRequest,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSpec,
    cost_of,
)
from core.models.catalog import DEFAULT_MODEL, anthropic_model_info, create_model
from core.tools import AgentTool, ToolContext, ToolResult
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    RawBlockOut,
    SSEReply,
    TextOut,
    ThinkingOut,
    ToolUseOut,
    block_events,
    error_event,
    error_reply,
    events_of,
    message_end,
    message_start,
    sse,
    text_reply,
)

API_KEY = "sk-ant-api03-test-key-do-not-leak"
SYSTEM = "You are Teammate, a helpful assistant."
PNG = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmM"
    "IQAAAABJRU5ErkJggg=="
)


class SleepRecorder:
    """An injected retry sleep: records the delays asked for and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def model(client: anthropic.AsyncAnthropic, sleeps: SleepRecorder) -> AnthropicModel:
    return AnthropicModel(client=client, retry=RetryPolicy(max_retries=3, sleep=sleeps))


def ask(*messages: Message, tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(system_prompt=SYSTEM, messages=list(messages), tools=tools or [])


async def collect(
    model: AnthropicModel, request: ModelRequest
) -> tuple[list[StreamEvent], AssistantMessage]:
    events = [event async for event in model.stream(request)]
    assert isinstance(events[0], StreamStart)
    ends = [event for event in events if isinstance(event, StreamEnd)]
    assert len(ends) == 1 and events[-1] is ends[0], "exactly one StreamEnd, last"
    return events, ends[0].message


def texts(events: list[StreamEvent]) -> str:
    return "".join(event.delta for event in events if isinstance(event, TextDelta))


# -- streaming -------------------------------------------------------------------------------------


async def test_streams_text_in_deltas_and_ends_with_the_message(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(text_reply("Hello there, team!"))

    events, reply = await collect(model, ask(UserMessage(content="hi")))

    deltas = [event for event in events if isinstance(event, TextDelta)]
    assert len(deltas) > 1
    assert texts(events) == "Hello there, team!"
    assert reply.text() == "Hello there, team!"
    assert reply.stop_reason == "stop" and reply.error_message is None
    assert reply.model == DEFAULT_MODEL and reply.provider == "anthropic"
    [received] = fake.requests
    assert received.headers["authorization"] == f"Bearer {API_KEY}"
    assert received.body["model"] == DEFAULT_MODEL
    assert received.body["stream"] is True
    assert received.body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert "temperature" not in received.body


async def test_thinking_streams_and_is_replayed_with_its_signature(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    signature = "EqQBCkYIBhgCKkDsig+nature/xyz=="
    fake.add(sse(ThinkingOut("Let me think about this carefully.", signature), TextOut("42")))
    fake.add(text_reply("You're welcome."))
    question = UserMessage(content="What is the answer?")

    events, reply = await collect(model, ask(question))

    thought = "".join(e.delta for e in events if isinstance(e, ThinkingDelta))
    assert thought == "Let me think about this carefully."
    assert reply.content == [
        Thinking(thinking="Let me think about this carefully.", signature=signature),
        Text(text="42"),
    ]

    await collect(model, ask(question, reply, UserMessage(content="thanks")))

    replayed = fake.bodies[1]["messages"][1]
    assert replayed == {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "Let me think about this carefully.",
                "signature": signature,
            },
            {"type": "text", "text": "42"},
        ],
    }


async def test_tool_call_arguments_arrive_in_deltas_and_are_parsed(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    chunks = ['{"pa', 'th": "src/', 'main.py", "li', 'mit": 20}']
    fake.add(
        sse(
            TextOut("Reading it."),
            ToolUseOut("toolu_01", "read", chunks),
            stop_reason="tool_use",
        )
    )
    read_spec = ToolSpec(
        name="read",
        description="Read a file.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    )

    events, reply = await collect(model, ask(UserMessage(content="read main"), tools=[read_spec]))

    call_deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [d.json_delta for d in call_deltas if d.json_delta] == chunks
    assert all(d.tool_call_id == "toolu_01" and d.tool_name == "read" for d in call_deltas)
    assert call_deltas[0].index == 1
    assert reply.stop_reason == "tool_use"
    assert reply.tool_calls() == [
        ToolCall(id="toolu_01", name="read", arguments={"path": "src/main.py", "limit": 20})
    ]
    assert fake.bodies[0]["tools"] == [
        {
            "name": "read",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]


async def test_usage_counts_cache_reads_and_writes_and_prices_them(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(
        text_reply(
            "Cached.",
            input_tokens=120,
            cache_read=3_000,
            cache_write=500,
            output_tokens=5,
            # message_delta usage is cumulative: the final counts replace the first ones.
            final_usage={"input_tokens": 120, "cache_read_input_tokens": 3_000},
        )
    )
    fake.requests.clear()

    _, reply = await collect(model, ask(UserMessage(content="hi")))

    expected = Usage(input=120, output=5, cache_read=3_000, cache_write=500)
    assert reply.usage.model_dump(exclude={"cost"}) == expected.model_dump(exclude={"cost"})
    prices = anthropic_model_info(DEFAULT_MODEL).prices
    assert reply.usage.cost == pytest.approx(cost_of(expected, prices))
    assert reply.usage.cost == pytest.approx(
        (120 * 2.0 + 5 * 10.0 + 3_000 * 0.10 + 500 * 2.50) / 1_000_000
    )


# -- retries ---------------------------------------------------------------------------------------


async def test_429_and_529_are_retried_after_the_servers_retry_after(
    fake: FakeAnthropic, model: AnthropicModel, sleeps: SleepRecorder
) -> None:
    fake.add(
        error_reply(429, "rate_limit_error", "Rate limited", headers={"retry-after": "2"}),
        error_reply(529, "overloaded_error", "Overloaded", headers={"retry-after-ms": "30"}),
        text_reply("Finally."),
    )

    events, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "stop" and reply.text() == "Finally."
    assert texts(events) == "Finally."
    assert len(fake.requests) == 3
    assert sleeps.delays == [2.0, 0.03]


async def test_real_backoff_waits_for_retry_after(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    model = AnthropicModel(client=client, retry=RetryPolicy(max_retries=1))
    fake.add(
        error_reply(529, "overloaded_error", "Overloaded", headers={"retry-after-ms": "150"}),
        text_reply("ok"),
    )
    started = asyncio.get_running_loop().time()

    _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.text() == "ok"
    assert asyncio.get_running_loop().time() - started >= 0.15


async def test_gives_up_after_max_retries_with_a_clear_error(
    fake: FakeAnthropic, model: AnthropicModel, sleeps: SleepRecorder
) -> None:
    for _ in range(4):
        fake.add(error_reply(529, "overloaded_error", "Overloaded"))

    _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "error" and reply.error_kind == "overloaded"
    assert reply.error_message is not None and "overloaded" in reply.error_message.lower()
    assert len(fake.requests) == 4
    assert len(sleeps.delays) == 3


async def test_overloaded_error_mid_stream_is_retried_before_anything_was_shown(
    fake: FakeAnthropic, model: AnthropicModel, sleeps: SleepRecorder
) -> None:
    fake.add(
        SSEReply(
            events=[
                message_start(),
                ("ping", {"type": "ping"}),
                error_event("overloaded_error", "Overloaded"),
            ]
        ),
        text_reply("Recovered."),
    )

    events, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "stop" and reply.text() == "Recovered."
    assert texts(events) == "Recovered."
    assert len(fake.requests) == 2
    assert len(sleeps.delays) == 1


async def test_dropped_connection_before_any_text_is_retried(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    dropped = text_reply("never seen")
    dropped.drop_after = 2
    fake.add(dropped, text_reply("Second try."))

    events, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.text() == "Second try." and texts(events) == "Second try."
    assert len(fake.requests) == 2


async def test_error_mid_stream_after_text_ends_with_an_error_and_no_repeat(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(
        SSEReply(
            events=events_of(
                [message_start()],
                block_events(0, TextOut("Half an answer", chunk_size=4))[:-1],
                [error_event("overloaded_error", "Overloaded")],
            )
        ),
        text_reply("must not be requested"),
    )

    events, reply = await collect(model, ask(UserMessage(content="hi")))

    assert texts(events) == "Half an answer"
    assert reply.text() == "Half an answer"
    assert reply.stop_reason == "error" and reply.error_kind == "overloaded"
    assert len(fake.requests) == 1
    assert fake.remaining == 1


# -- errors ----------------------------------------------------------------------------------------


async def test_prompt_too_long_is_reported_as_context_overflow(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(
        error_reply(400, "invalid_request_error", "prompt is too long: 1048712 tokens > 1000000")
    )

    _, reply = await collect(model, ask(UserMessage(content="a lot")))

    assert reply.stop_reason == "error" and reply.error_kind == "context_overflow"
    assert reply.error_message is not None and "too long" in reply.error_message
    assert len(fake.requests) == 1


async def test_rejected_key_is_an_authentication_error_that_never_shows_the_key(
    fake: FakeAnthropic,
) -> None:
    wrong_key = "sk-ant-api03-wrong-secret-1234567890"
    async with anthropic.AsyncAnthropic(
        api_key=wrong_key, base_url=fake.url, max_retries=0, _strict_response_validation=True
    ) as sdk:
        model = AnthropicModel(client=sdk, retry=RetryPolicy(sleep=SleepRecorder()))
        _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "error" and reply.error_kind == "authentication"
    assert reply.error_message is not None
    assert wrong_key not in reply.error_message and "sk-ant" not in reply.error_message
    assert len(fake.requests) == 1


async def test_an_api_message_that_echoes_the_key_is_redacted(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(error_reply(400, "invalid_request_error", f"bad header value {API_KEY}"))

    _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.error_kind == "invalid_request"
    assert reply.error_message is not None and API_KEY not in reply.error_message
    assert "[redacted]" in reply.error_message


async def test_unreachable_api_is_a_connection_error(client: anthropic.AsyncAnthropic) -> None:
    sleeps = SleepRecorder()
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url="http://127.0.0.1:9", max_retries=0
    ) as dead:
        model = AnthropicModel(client=dead, retry=RetryPolicy(max_retries=2, sleep=sleeps))
        _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "error" and reply.error_kind == "connection"
    assert len(sleeps.delays) == 2


async def test_refusal_ends_with_a_refusal_error(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(
        sse(
            TextOut("I can"),
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": "cyber", "explanation": "Policy."},
        )
    )

    _, reply = await collect(model, ask(UserMessage(content="something bad")))

    assert reply.stop_reason == "error" and reply.error_kind == "refusal"
    assert reply.error_message is not None and "declined" in reply.error_message


async def test_a_reply_that_filled_the_context_window_is_kept_as_a_cut_off_reply(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    # Not an error: what was written is the answer so far (like a max_tokens cut), and it is
    # kept and shown rather than discarded for a compaction and a second, costlier call.
    fake.add(text_reply("partial answer", stop_reason="model_context_window_exceeded"))

    _, reply = await collect(model, ask(UserMessage(content="hi")))

    assert reply.stop_reason == "length" and reply.error_kind is None
    assert reply.text() == "partial answer"
    assert len(fake.requests) == 1


async def test_complete_returns_the_streamed_message_from_one_request(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(text_reply("A summary."))

    reply = await model.complete(ask(UserMessage(content="summarise")))

    assert reply.text() == "A summary." and reply.stop_reason == "stop"
    assert len(fake.requests) == 1 and fake.bodies[0]["stream"] is True


async def test_max_tokens_is_length_and_a_cut_off_tool_call_gets_empty_arguments(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    cut = block_events(0, ToolUseOut("toolu_9", "write", ['{"path": "a.txt", "content": "lo']))
    fake.add(SSEReply(events=[message_start(), *cut[:-1], *message_end("max_tokens")]))

    _, reply = await collect(model, ask(UserMessage(content="write it")))

    assert reply.stop_reason == "length"
    assert reply.tool_calls() == [ToolCall(id="toolu_9", name="write", arguments={})]


async def test_pause_turn_resumes_into_the_same_message(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    search_input = RawBlockOut(search, json_chunks=['{"query": ', '"teammate"}'])
    fake.add(
        sse(TextOut("Searching. "), search_input, stop_reason="pause_turn", output_tokens=7),
        sse(TextOut("Found it."), output_tokens=3),
    )

    events, reply = await collect(model, ask(UserMessage(content="look it up")))

    assert reply.stop_reason == "stop"
    assert texts(events) == "Searching. Found it."
    assert [type(part) for part in reply.content] == [Text, ProviderBlock, Text]
    assert reply.usage.output == 10 and reply.usage.input == 20
    assert len(fake.requests) == 2
    resumed = fake.bodies[1]["messages"]
    assert resumed[0]["role"] == "user"
    assert resumed[-1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Searching. "},
            {**search, "input": {"query": "teammate"}},
        ],
    }


# -- what the API receives -------------------------------------------------------------------------


def _cache_marks(body: dict[str, Any]) -> list[str]:
    marks = [f"system.{i}" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list):
            marks += [f"messages.{m}.{b}" for b, x in enumerate(content) if "cache_control" in x]
    return marks


async def test_request_translation(fake: FakeAnthropic, model: AnthropicModel) -> None:
    call_a = ToolCall(id="toolu_a", name="read", arguments={"path": "a.png"})
    call_b = ToolCall(id="toolu_b", name="ls", arguments={})
    history: list[Message] = [
        UserMessage(
            content=[Text(text="What is in this picture?"), Image(data=PNG, mime_type="image/png")],
            author=Author(id="U1", name="Ada"),
        ),
        AssistantMessage(
            model=DEFAULT_MODEL,
            provider="anthropic",
            content=[
                Thinking(thinking="unsigned musing", signature=None),
                RedactedThinking(data="opaque-bytes"),
                ProviderBlock(provider="other", data={"type": "weird"}),
                Text(text="Let me look."),
                call_a,
                call_b,
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(
            tool_call_id="toolu_a",
            tool_name="read",
            content=[Text(text="an image:"), Image(data=PNG, mime_type="image/png")],
        ),
        ToolResultMessage(
            tool_call_id="toolu_b",
            tool_name="ls",
            content=[Text(text="no such dir")],
            is_error=True,
        ),
        UserMessage(content="also, hurry"),
        AssistantMessage(model=DEFAULT_MODEL, provider="anthropic", content=[]),
        UserMessage(content="please"),
    ]
    fake.add(text_reply("A cat."))

    _, reply = await collect(model, ask(*history))

    assert reply.stop_reason == "stop"
    body = fake.bodies[0]
    assert body["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, image]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "unsigned musing"},
                {"type": "redacted_thinking", "data": "opaque-bytes"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.png"}},
                {"type": "tool_use", "id": "toolu_b", "name": "ls", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": [{"type": "text", "text": "an image:"}, image],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "no such dir"}],
                    "is_error": True,
                },
                # The empty assistant message between the two user turns was not sent.
                {"type": "text", "text": "also, hurry"},
                {"type": "text", "text": "please", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    assert _cache_marks(body) == ["system.0", "messages.2.3"]
    assert "Ada" not in json.dumps(body)


async def test_system_prompt_is_byte_identical_and_the_breakpoint_moves_to_the_new_turn(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    first = UserMessage(content="first question")
    fake.add(text_reply("first answer"), text_reply("second answer"))

    _, reply = await collect(model, ask(first))
    await collect(model, ask(first, reply, UserMessage(content="second question")))

    one, two = fake.bodies
    assert json.dumps(one["system"]) == json.dumps(two["system"])
    assert _cache_marks(one) == ["system.0", "messages.0.0"]
    assert _cache_marks(two) == ["system.0", "messages.2.0"]
    # The earlier turn is sent exactly as before, so the cached prefix still matches.
    assert two["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "first question"}],
    }


def _picture(n: int, size: int) -> UserMessage:
    # base64 of the right alphabet; the fake API does not decode images.
    data = (f"{n:04d}" * (size // 4 + 1))[:size]
    return UserMessage(content=[Text(text=f"picture {n}"), Image(data=data, mime_type="image/png")])


def _image_data(message: UserMessage) -> str:
    assert isinstance(message.content, list)
    return next(part.data for part in message.content if isinstance(part, Image))


async def test_the_conversion_cache_holds_its_byte_budget_as_big_images_arrive(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    budget = 300_000
    model = AnthropicModel(client=client, conversion_cache_bytes=budget)
    history: list[Message] = []
    # 8 images of 100 KB (800 KB: the fake API takes requests up to 1 MiB) through 300 KB.
    for n in range(8):
        history.append(_picture(n, 100_000))
        fake.add(text_reply(f"seen {n}"))
        _, reply = await collect(model, ask(*history))
        assert reply.stop_reason == "stop", reply.error_message
        history.append(reply)
        assert model.conversion_cache.bytes_used <= budget

    cache = model.conversion_cache
    pictures = [m for m in history if isinstance(m, UserMessage)]
    # The newest stay (the next request sends them again); the oldest were evicted.
    assert pictures[-1] in cache and pictures[-2] in cache
    assert pictures[0] not in cache and pictures[1] not in cache
    assert cache.bytes_used > budget // 2  # it is used, not emptied
    # Evicted or not, every image went out whole in the last request.
    sent = [
        block["source"]["data"]
        for message in fake.bodies[-1]["messages"]
        for block in message["content"]
        if block["type"] == "image"
    ]
    assert sent == [_image_data(p) for p in pictures]


async def test_a_message_bigger_than_the_budget_is_sent_but_not_kept(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    model = AnthropicModel(client=client, conversion_cache_bytes=100_000)
    small, huge = UserMessage(content="look at this"), _picture(1, 300_000)
    fake.add(text_reply("a big one"))

    _, reply = await collect(model, ask(small, huge))
    assert reply.stop_reason == "stop", reply.error_message

    assert small in model.conversion_cache and huge not in model.conversion_cache
    assert model.conversion_cache.bytes_used < 100_000
    assert fake.bodies[0]["messages"][0]["content"][-1]["source"]["data"] == _image_data(huge)


def test_the_conversion_cache_evicts_the_least_recently_used() -> None:
    cache = ConversionCache(max_bytes=2_500)
    a, b, c = (UserMessage(content=name * 1_000) for name in "abc")
    for message in (a, b):
        cache.put(message, "user", [{"type": "text", "text": message.content}])
    assert cache.get(a) is not None  # a is now more recent than b

    cache.put(c, "user", [{"type": "text", "text": c.content}])

    assert a in cache and c in cache and b not in cache
    assert cache.get(b) is None
    assert len(cache) == 2 and cache.bytes_used <= 2_500


async def test_thinking_from_another_model_is_not_replayed_as_signed_thinking(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    older = AssistantMessage(
        model="claude-opus-4-6",
        provider="anthropic",
        content=[Thinking(thinking="old thoughts", signature="sig-old"), Text(text="Hi.")],
    )
    fake.add(text_reply("ok"))

    await collect(model, ask(UserMessage(content="a"), older, UserMessage(content="b")))

    assert fake.bodies[0]["messages"][1]["content"] == [
        {"type": "text", "text": "old thoughts"},
        {"type": "text", "text": "Hi."},
    ]


# -- cancellation ----------------------------------------------------------------------------------


async def test_closing_the_stream_early_closes_the_http_response(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    slow = text_reply("a fairly long answer that keeps on streaming for a while", chunk_size=2)
    slow.event_delay_s = 0.02
    fake.add(slow)

    stream = model.stream(ask(UserMessage(content="hi")))
    assert isinstance(stream, AsyncGenerator)
    async with aclosing(stream):
        async for event in stream:
            if isinstance(event, TextDelta):
                break

    await asyncio.wait_for(fake.stream_finished.wait(), timeout=2)
    assert fake.disconnects == 1


async def test_cancelling_the_consumer_propagates(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    slow = text_reply("slow slow slow slow slow slow slow slow", chunk_size=1)
    slow.event_delay_s = 0.02
    fake.add(slow)
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in model.stream(ask(UserMessage(content="hi"))):
            if isinstance(event, TextDelta):
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), timeout=2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.stream_finished.wait(), timeout=2)
    assert fake.disconnects == 1


# -- with the real loop ----------------------------------------------------------------------------


class EchoParams(BaseModel):
    text: str


class EchoTool(AgentTool[EchoParams]):
    name: ClassVar[str] = "echo"
    label: ClassVar[str] = "Echo"
    description: ClassVar[str] = "Repeat the text back."
    parameters: ClassVar[type[BaseModel]] = EchoParams

    async def execute(self, call_id: str, params: EchoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(f"echo: {params.text}")


async def test_a_full_tool_round_trip_through_run_agent(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.add(
        sse(
            ThinkingOut("I should echo.", "sig-1"),
            ToolUseOut("toolu_e", "echo", ['{"text":', ' "ping"}']),
            stop_reason="tool_use",
        ),
        text_reply("The tool said ping."),
    )
    context = AgentContext(
        system_prompt=SYSTEM, messages=[UserMessage(content="echo ping")], tools=[EchoTool()]
    )

    events: list[AgentEvent] = [event async for event in run_agent(context, model)]

    end = events[-1]
    assert isinstance(end, AgentEnd) and end.reason == "stop"
    [tool_end] = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert tool_end.result.text() == "echo: ping" and not tool_end.result.is_error
    assert any(isinstance(e, MessageUpdate) and isinstance(e.delta, ToolCallDelta) for e in events)
    assert [type(m).__name__ for m in end.messages] == [
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    second = fake.bodies[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"][0] == {
        "type": "thinking",
        "thinking": "I should echo.",
        "signature": "sig-1",
    }
    assert second[1]["content"][1]["type"] == "tool_use"
    assert second[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_e",
            "content": [{"type": "text", "text": "echo: ping"}],
            "cache_control": {"type": "ephemeral"},
        }
    ]


# -- the catalog -----------------------------------------------------------------------------------


def test_catalog_default_model_is_a_current_sonnet_with_prices() -> None:
    info = anthropic_model_info(DEFAULT_MODEL)
    assert DEFAULT_MODEL.startswith("claude-sonnet-") and DEFAULT_MODEL != "claude-sonnet-4-5"
    assert info.prices.input > 0 and info.prices.cache_read < info.prices.input
    assert anthropic_model_info("claude-haiku-4-5-20251001").prices.input == 1.0


async def test_create_model_builds_scripted_and_anthropic_models(fake: FakeAnthropic) -> None:
    scripted = create_model("scripted")
    assert scripted.info.provider == "scripted"
    model = create_model("claude-haiku-4-5", api_key=API_KEY, base_url=fake.url)
    assert isinstance(model, AnthropicModel)
    fake.add(text_reply("fast"))
    try:
        _, reply = await collect(model, ask(UserMessage(content="hi")))
    finally:
        await model.aclose()
    assert reply.text() == "fast" and reply.model == "claude-haiku-4-5"
    # Haiku 4.5 has no adaptive thinking: none is asked for.
    assert "thinking" not in fake.bodies[0]


async def test_probe_checks_the_model_without_generating(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    assert await model.probe() is None
    [request] = fake.requests
    assert request.method == "GET" and request.path == f"/v1/models/{model.info.id}"
    fake.retired_models.add(model.info.id)
    assert "is retired" in (await model.probe() or "")
    fake.missing_models.add(model.info.id)
    problem = await model.probe()
    assert problem is not None and API_KEY not in problem


async def test_probe_with_a_rejected_key_says_so_without_the_key(fake: FakeAnthropic) -> None:
    sdk = anthropic.AsyncAnthropic(
        api_key="sk-ant-wrong-key-000",
        base_url=fake.url,
        max_retries=0,
        _strict_response_validation=True,
    )
    try:
        problem = await AnthropicModel(client=sdk).probe()
    finally:
        await sdk.close()
    assert problem is not None and "sk-ant-wrong-key-000" not in problem
