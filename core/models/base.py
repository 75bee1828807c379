"""The Model contract: what the loop asks of any language model.

Owns: `ModelRequest`, the `StreamEvent` union a model yields, `ModelInfo` (limits and prices)
and `cost_of`. A model streams events and always ends with exactly one `StreamEnd` carrying the
final `AssistantMessage`. Request, network and API failures are data, never exceptions: they end
the stream with `stop_reason="error"`, a human-readable `error_message` and an `error_kind`.

Must not: know any provider's wire format (that is each adapter's business).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.messages import AssistantMessage, Message, Usage


class ToolSpec(BaseModel):
    """What a model is told about a tool: its name, its pitch and its JSON schema."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class ModelRequest:
    """One call to a model. `messages` is already repaired (see `core.history`) and is the
    caller's snapshot: a model may keep it but must not change it.

    A plain dataclass on purpose: validating every message of a long history on every call
    would make a turn cost O(history)."""

    system_prompt: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int | None = None


class Prices(BaseModel):
    """USD per million tokens for one request.

    `long_context`: the rates of a request whose prompt (input + cache read + cache write)
    is over `long_context_threshold` tokens; they then apply to every token of that request,
    output included (e.g. Claude Haiku 5.5 above 100,000 prompt tokens). None: one rate at
    every prompt size.
    `estimated`: not published prices but a conservative stand-in (a model the catalog does
    not know), so a cost is an upper estimate rather than a bill."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    long_context_threshold: int | None = Field(default=None, gt=0)
    long_context: Prices | None = None
    estimated: bool = False

    @model_validator(mode="after")
    def _tiers_come_in_pairs(self) -> Prices:
        if (self.long_context is None) != (self.long_context_threshold is None):
            raise ValueError("long_context and long_context_threshold go together")
        if self.long_context is not None and self.long_context.long_context is not None:
            raise ValueError("long_context rates cannot have a further tier")
        return self

    def for_prompt(self, prompt_tokens: int) -> Prices:
        """The rates for a request whose prompt is `prompt_tokens` long."""
        if (
            self.long_context is not None
            and self.long_context_threshold is not None
            and prompt_tokens > self.long_context_threshold
        ):
            return self.long_context
        return self


class ModelInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    provider: str
    context_window: int = 200_000
    max_output_tokens: int = 8_192
    prices: Prices = Field(default_factory=Prices)
    supports_thinking: bool = False
    supports_images: bool = True


def cost_of(usage: Usage, prices: Prices) -> float:
    """USD cost of one request's `usage` at `prices`, at the long-context rates when its prompt
    (input + cache read + cache write, as the pricing page counts it) is over the threshold.

    `usage` must be one request's: the sum of several requests may cross a threshold none of
    them crossed, and is then priced high (never low)."""
    rates = prices.for_prompt(usage.input + usage.cache_read + usage.cache_write)
    return (
        usage.input * rates.input
        + usage.output * rates.output
        + usage.cache_read * rates.cache_read
        + usage.cache_write * rates.cache_write
    ) / 1_000_000


# Stream events. Each delta event carries `partial`: the assistant message as built so far.
# It is the model's working copy, updated in place: read it, don't keep it.


@dataclass(slots=True, frozen=True)
class StreamStart:
    partial: AssistantMessage


@dataclass(slots=True, frozen=True)
class TextDelta:
    partial: AssistantMessage
    index: int
    delta: str


@dataclass(slots=True, frozen=True)
class ThinkingDelta:
    partial: AssistantMessage
    index: int
    delta: str


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A fragment of a tool call's JSON arguments, as the model writes them."""

    partial: AssistantMessage
    index: int
    tool_call_id: str
    tool_name: str
    json_delta: str


@dataclass(slots=True, frozen=True)
class StreamEnd:
    message: AssistantMessage


StreamEvent: TypeAlias = StreamStart | TextDelta | ThinkingDelta | ToolCallDelta | StreamEnd
StreamDelta: TypeAlias = TextDelta | ThinkingDelta | ToolCallDelta


@runtime_checkable
class Model(Protocol):
    """A language model. `stream` must end with one `StreamEnd` and must not raise for API,
    request or network failures. Cancelling the consuming task (or closing the iterator)
    closes the underlying request."""

    @property
    def info(self) -> ModelInfo: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...
