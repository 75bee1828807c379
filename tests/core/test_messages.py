"""A conversation survives a JSON round trip exactly."""

from __future__ import annotations

from core.messages import (
    AssistantMessage,
    Author,
    Image,
    ProviderBlock,
    RedactedThinking,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    dump_messages,
    load_messages,
)


def test_every_kind_of_content_round_trips_exactly() -> None:
    messages = [
        UserMessage(
            content=[
                Text(text="what is in this picture?"),
                Image(data="iVBORw0KGgo=", mime_type="image/png"),
            ],
            author=Author(id="U1", name="Ada"),
            platform_message_id="1700000000.000100",
        ),
        UserMessage(content="plain text ✓ 日本語"),
        AssistantMessage(
            content=[
                Thinking(thinking="let me look", signature="sig-abc=="),
                RedactedThinking(data="EncryptedOpaque=="),
                Text(text="Reading it."),
                ToolCall(
                    id="toolu_1",
                    name="read",
                    arguments={"path": "a.txt", "nested": {"n": [1, 2.5, None]}},
                ),
                ProviderBlock(
                    provider="anthropic",
                    data={"type": "server_tool_use", "id": "srv_1", "input": {}},
                ),
            ],
            model="claude-sonnet-4-6",
            provider="anthropic",
            usage=Usage(input=10, output=20, cache_read=30, cache_write=40, cost=0.0123),
            stop_reason="tool_use",
        ),
        ToolResultMessage(
            tool_call_id="toolu_1",
            tool_name="read",
            content=[Text(text="hello"), Image(data="R0lGOD", mime_type="image/gif")],
            details={"truncated": False, "lines": [1, 2]},
            is_error=False,
        ),
        AssistantMessage(stop_reason="error", error_message="overloaded", error_kind="overloaded"),
    ]
    data = dump_messages(messages)
    restored = load_messages(data)
    assert restored == messages
    assert dump_messages(restored) == data
    assert [type(m) for m in restored] == [type(m) for m in messages]
