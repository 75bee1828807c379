"""A conversation that uses every kind of message and content block, for round-trip tests."""

from __future__ import annotations

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


def every_kind_of_message() -> list[Message]:
    return [
        UserMessage(
            content=[
                Text(text="what is in this picture?"),
                Image(data="iVBORw0KGgo=", mime_type="image/png"),
            ],
            author=Author(id="U1", name="Ada"),
            platform_message_id="1700000000.000100",
            timestamp=1.5,
        ),
        UserMessage(content="plain text ✓ 日本語 \x00 and a NUL", timestamp=2.0),
        AssistantMessage(
            content=[
                Thinking(thinking="let me look", signature="sig-abc=="),
                Thinking(thinking="unsigned thought"),
                RedactedThinking(data="EncryptedOpaque=="),
                Text(text="Reading it."),
                ToolCall(
                    id="toolu_1",
                    name="read",
                    arguments={"path": "a.txt", "nested": {"n": [1, 2.5, None, True]}},
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
            timestamp=3.0,
        ),
        ToolResultMessage(
            tool_call_id="toolu_1",
            tool_name="read",
            content=[Text(text="hello"), Image(data="R0lGOD", mime_type="image/gif")],
            details={"truncated": False, "lines": [1, 2]},
            timestamp=4.0,
        ),
        ToolResultMessage(
            tool_call_id="toolu_2",
            tool_name="bash",
            content=[Text(text="boom")],
            is_error=True,
            timestamp=5.0,
        ),
        AssistantMessage(
            stop_reason="error",
            error_message="overloaded",
            error_kind="overloaded",
            timestamp=6.0,
        ),
        AssistantMessage(content=[Text(text="cut")], stop_reason="aborted", timestamp=7.0),
        AssistantMessage(content=[Text(text="long")], stop_reason="length", timestamp=8.0),
    ]
