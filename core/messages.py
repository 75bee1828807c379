"""The one message protocol every part of Teammate speaks.

Owns: the shapes of user, assistant and tool-result messages and their content blocks, `Usage`,
and the single `TypeAdapter` that stores and reloads a conversation. Provider adapters translate
to and from these shapes at the edge; nothing else knows a provider's wire format.

Must not: import anything of ours, or know about a provider, a platform or a database.
Provider-only data (thinking signatures, redacted thinking, server-tool blocks) lives in fields
meant for it and is replayed verbatim; it is never folded into text.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

StopReason: TypeAlias = Literal["stop", "length", "tool_use", "error", "aborted"]

# Why a model call failed, so callers can react (retry later, compact, tell people) without
# parsing prose. `None` on every message that did not fail.
ErrorKind: TypeAlias = Literal[
    "context_overflow",
    "overloaded",
    "rate_limited",
    "authentication",
    "invalid_request",
    "connection",
    "refusal",
    "server",
    "aborted",
    "other",
]


def now() -> float:
    """Wall-clock timestamp in seconds, as every message carries it."""
    return time.time()


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Text(_Part):
    type: Literal["text"] = "text"
    text: str


class Image(_Part):
    """An image as base64 data; `mime_type` is one of the types models accept."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str


class Thinking(_Part):
    """The model's reasoning. `signature` proves it to the provider when replayed."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinking(_Part):
    """Reasoning the provider encrypted; `data` is opaque and replayed byte for byte."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolCall(_Part):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ProviderBlock(_Part):
    """A block only its provider understands (e.g. a server-side tool use and its result).

    Kept verbatim in `data` and replayed only to the same `provider`.
    """

    type: Literal["provider_block"] = "provider_block"
    provider: str
    data: dict[str, Any]


UserContent: TypeAlias = Annotated[Text | Image, Field(discriminator="type")]
AssistantContent: TypeAlias = Annotated[
    Text | Thinking | RedactedThinking | ToolCall | ProviderBlock, Field(discriminator="type")
]
ToolResultContent: TypeAlias = UserContent


class Usage(BaseModel):
    """Token counts of one model reply. `input` excludes cached tokens; cost is in USD."""

    model_config = ConfigDict(extra="forbid")

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            cost=self.cost + other.cost,
        )


class Author(BaseModel):
    """Who wrote a user message: a platform user id and the name people know them by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str


class UserMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user"] = "user"
    content: str | list[UserContent]
    timestamp: float = Field(default_factory=now)
    author: Author | None = None
    # The platform's id for the message this came from (Slack ts, Discord message id).
    platform_message_id: str | None = None

    def text(self) -> str:
        """The message's text, images left out."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, Text))


class AssistantMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = Field(default_factory=list)
    model: str = ""
    provider: str = ""
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    error_kind: ErrorKind | None = None
    timestamp: float = Field(default_factory=now)
    # What the provider says identifies the request this reply answered (Anthropic: a digest
    # of its system, tools and messages). Kept so that a later request can tell whether the
    # reply's signed thinking is still bound to an unchanged prefix; opaque to everyone else.
    prefix_digest: str | None = None

    def text(self) -> str:
        return "".join(part.text for part in self.content if isinstance(part, Text))

    def tool_calls(self) -> list[ToolCall]:
        return [part for part in self.content if isinstance(part, ToolCall)]


class ToolResultMessage(BaseModel):
    """A tool's observation. `content` goes to the model; `details` is for people only."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = Field(default_factory=list)
    details: Any = None
    is_error: bool = False
    timestamp: float = Field(default_factory=now)

    def text(self) -> str:
        return "".join(part.text for part in self.content if isinstance(part, Text))


Message: TypeAlias = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")
]

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def dump_message(message: Message) -> bytes:
    """One message as JSON bytes; `load_message` gives back an equal message."""
    return MESSAGE_ADAPTER.dump_json(message)


def load_message(data: str | bytes) -> Message:
    return MESSAGE_ADAPTER.validate_json(data)


def dump_messages(messages: list[Message]) -> bytes:
    return MESSAGES_ADAPTER.dump_json(messages)


def load_messages(data: str | bytes) -> list[Message]:
    return MESSAGES_ADAPTER.validate_json(data)
