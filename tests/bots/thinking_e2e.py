"""Scripting the default model's signed thinking for end-to-end tests on every surface (Slack,
Discord, the terminal), and what to assert on what the fake Messages API received.

The default model (claude-sonnet-5-5) thinks before it writes or calls a tool, and the API binds
each signed thinking block to everything before it: a later request that replays the block after
that prefix changed is refused with a 400, forever, unless it asks for `drop_block` with the beta
header (tests/fakes/anthropic_server.py enforces this as the API does). These helpers script
replies as the real model streams them and check the two things a person relies on: nothing was
refused, and the guard was sent exactly where the prefix really changed.

One place for all three surfaces: the platform tests import from here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tests.fakes.anthropic_server import (
    BINDING_BETA,
    FakeAnthropic,
    RecordedRequest,
    SSEReply,
    TextOut,
    ThinkingOut,
    ToolUseOut,
    bare,
    sse,
)

KEY = "sk-ant-api03-e2e-thinking-key"
MODEL_ID = "claude-sonnet-5-5"  # the default model, which preserves (and binds) thinking
CONTEXT_OPEN = "<channel-context>"


@asynccontextmanager
async def fake_messages_api() -> AsyncIterator[FakeAnthropic]:
    """A started FakeAnthropic that accepts `KEY`."""
    fake = FakeAnthropic(api_key=KEY)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def api_settings(fake: FakeAnthropic) -> dict[str, Any]:
    """Settings fields that point the real Anthropic adapter at `fake`."""
    return {"anthropic_api_key": KEY, "anthropic_base_url": fake.url}


def model_env(fake: FakeAnthropic) -> dict[str, str]:
    """The same, as the environment of a `teammate` process."""
    return {
        "TEAMMATE_MODEL": MODEL_ID,
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": fake.url,
    }


# -- replies as the default model streams them ----------------------------------------------------


def answer(text: str, signature: str) -> SSEReply:
    """Signed thinking, then the answer's text."""
    return sse(ThinkingOut(f"Thinking about how to say: {text}", signature), TextOut(text))


def tool_call(name: str, arguments: dict[str, Any], *, call_id: str, signature: str) -> SSEReply:
    """Signed thinking, then one tool call."""
    return sse(
        ThinkingOut(f"I should call {name}.", signature),
        ToolUseOut(call_id, name, [json.dumps(arguments)]),
        stop_reason="tool_use",
    )


# -- what the fake received -----------------------------------------------------------------------


def message_requests(fake: FakeAnthropic) -> list[RecordedRequest]:
    """The Messages requests the fake received (model look-ups left out), in order."""
    return [r for r in fake.requests if r.method == "POST" and r.path == "/v1/messages"]


def guarded(request: RecordedRequest) -> bool:
    """Did this request ask the API to drop stale thinking (beta header and `block_binding`)?
    Half of it (one without the other) fails the test: the API refuses that too."""
    header = BINDING_BETA in request.headers.get("anthropic-beta", "")
    binding = (request.body.get("thinking") or {}).get("block_binding")
    assert header == (binding is not None), (request.headers, request.body.get("thinking"))
    if binding is not None:
        assert binding == {"prefix_mismatch_behavior": "drop_block"}
    return header


def guards(fake: FakeAnthropic) -> list[bool]:
    """`guarded` for every Messages request, in order."""
    return [guarded(request) for request in message_requests(fake)]


def assert_never_refused(fake: FakeAnthropic) -> None:
    """No error was answered (in particular no 400 for replayed thinking): every request the
    adapter sent was accepted as it was."""
    assert fake.errors == [], fake.errors
    assert fake.remaining == 0, "a scripted reply was never asked for"


def assert_appended(earlier: RecordedRequest, later: RecordedRequest) -> None:
    """Append-only: `later` has the same system and tools, and its messages start with all of
    `earlier`'s unchanged (cache breakpoints aside)."""
    assert bare(later.body.get("system")) == bare(earlier.body.get("system"))
    assert bare(later.body.get("tools")) == bare(earlier.body.get("tools"))
    before = earlier.body["messages"]
    assert bare(later.body["messages"][: len(before)]) == bare(before)


def last_user_text(request: RecordedRequest) -> str:
    """Everything in the request's last user turn, as one string."""
    return json.dumps(request.body["messages"][-1]["content"], ensure_ascii=False)


def replays_thinking(request: RecordedRequest, signature: str) -> bool:
    """Does the request replay the thinking block signed `signature`?"""
    return any(
        isinstance(block, dict)
        and block.get("type") == "thinking"
        and block.get("signature") == signature
        for message in request.body["messages"]
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
    )
