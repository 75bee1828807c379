"""One Anthropic response's progress, and what reading it needs beyond the SDK's event types.

Owns: `ReplyProgress` (one reply across its responses: retries, `pause_turn`s resumed, usage),
`ResponseState` (usage, stop reason, where each API block landed in the message, partial
tool-call JSON), the one stop-reason table (`STOP_REASONS`), tool-call arguments parsed when
their block ends (`finish_block`, `finish_open_tool_calls`; arguments cut off by `max_tokens`
become `{}`), and the log line for replayed thinking the API dropped. The events themselves are
folded into the message in core.models.anthropic (`_apply`), the only module that imports the
SDK.

Must not: import `anthropic`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from core.messages import AssistantMessage, ErrorKind, ProviderBlock, StopReason, ToolCall, Usage

# The model's own logger: what a response does is logged where it always was.
log = logging.getLogger("core.models.anthropic")

# API stop reason -> (our stop reason, or "continue" to resume the turn; error kind; message).
STOP_REASONS: dict[str, tuple[StopReason | Literal["continue"], ErrorKind | None, str | None]] = {
    "end_turn": ("stop", None, None),
    "stop_sequence": ("stop", None, None),
    "max_tokens": ("length", None, None),
    "tool_use": ("tool_use", None, None),
    "pause_turn": ("continue", None, None),
    "refusal": ("error", "refusal", "Claude declined to continue with this request."),
    # The reply filled the context window: what was written is kept, like a `max_tokens` cut
    # (its tool calls are not run); the next request compacts if it would not fit.
    "model_context_window_exceeded": ("length", None, None),
}


@dataclass(slots=True)
class ResponseState:
    """One HTTP response's progress. Its blocks are appended to the message, after those of
    earlier responses when a `pause_turn` was resumed; `positions` maps its block indexes."""

    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    refusal_explanation: str | None = None
    stopped: bool = False
    positions: dict[int, int] = field(default_factory=dict)  # API index -> content index
    json_buffers: dict[int, str] = field(default_factory=dict)  # API index -> partial JSON


@dataclass(slots=True)
class ReplyProgress:
    """One reply across its responses: the conversation as first sent, the usage of the
    responses so far, the retries of the current attempt and the `pause_turn`s resumed."""

    history: list[dict[str, Any]]
    total: Usage = field(default_factory=Usage)
    retries: int = 0
    continuations: int = 0


def note_transformations(transformations: Any) -> None:
    """Log the replayed thinking the API dropped (`drop_block`): the reply goes on without
    that reasoning, which costs tokens and may cost quality, so operators should see it."""
    if not transformations:
        return
    dropped = [t for t in transformations if _field(t, "type") == "thinking_dropped"]
    if dropped:
        reasons = sorted({str(_field(t, "reason")) for t in dropped})
        log.info("Anthropic dropped %d replayed thinking block(s): %s", len(dropped), reasons)


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def finish_block(partial: AssistantMessage, state: ResponseState, api_index: int) -> None:
    """Parse a finished tool call's arguments (also for calls cut off by `max_tokens`)."""
    buffer = state.json_buffers.pop(api_index, None)
    position = state.positions.get(api_index)
    if buffer is None or position is None:
        return
    if not buffer.strip():
        return  # the input came whole with the block's start (or is empty)
    block = partial.content[position]
    arguments = _parse_arguments(buffer)
    if isinstance(block, ToolCall):
        block.arguments = arguments
    elif isinstance(block, ProviderBlock):
        block.data["input"] = arguments


def finish_open_tool_calls(partial: AssistantMessage, state: ResponseState) -> None:
    for api_index in list(state.json_buffers):
        finish_block(partial, state, api_index)


def _parse_arguments(buffer: str) -> dict[str, Any]:
    try:
        parsed = json.loads(buffer)
    except ValueError:
        # Cut off by max_tokens: the loop never runs a `length` call, so {} is safe.
        log.info("tool call arguments are not complete JSON (%d chars)", len(buffer))
        return {}
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {}
