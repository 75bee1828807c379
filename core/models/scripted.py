"""ScriptedModel: a real `Model` that replays scripted replies and records every request.

Owns: `Reply` (text, thinking, tool calls, stop reason, usage, per-chunk delays) and
`ScriptedModel`. Used by tests, benchmarks and `--model scripted` demos. It streams exactly as a
provider adapter does (start, deltas, end), so everything downstream is exercised for real.

A script entry is a `Reply`, a finished `AssistantMessage`, or a function of the request that
returns either (for replies that depend on what the model was sent). When the script runs out
the model answers with an error message saying so, loudly, rather than inventing a reply.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from core.messages import (
    AssistantMessage,
    StopReason,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from core.models.base import (
    ModelInfo,
    ModelRequest,
    Prices,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    cost_of,
)

_ids = itertools.count(1)


def call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> ToolCall:
    """A tool call for a script (ids are generated unless given)."""
    return ToolCall(id=id or f"call_{next(_ids)}", name=name, arguments=arguments or {})


@dataclass(slots=True)
class Reply:
    """One scripted assistant reply, streamed in chunks of `chunk_size` characters."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    thinking_signature: str | None = "scripted-signature"
    stop_reason: StopReason | None = None  # default: tool_use if there are calls, else stop
    usage: Usage | None = None
    error_message: str | None = None
    latency_s: float = 0.0  # before the first event
    chunk_delay_s: float = 0.0  # between chunks
    chunk_size: int = 16


ScriptEntry: TypeAlias = (
    Reply | AssistantMessage | Callable[[ModelRequest], Reply | AssistantMessage]
)

SCRIPTED_INFO = ModelInfo(
    id="scripted",
    provider="scripted",
    context_window=200_000,
    max_output_tokens=8_192,
    prices=Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
    supports_thinking=True,
)


class ScriptedModel:
    """Replays `script` in order; `requests` holds every request received.

    `default` (optional) answers once the script is used up, e.g. for benchmarks and demos.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        default: ScriptEntry | None = None,
        info: ModelInfo = SCRIPTED_INFO,
        record: bool = True,
    ) -> None:
        self._script: list[ScriptEntry] = list(script)
        self._default = default
        self._info = info
        self._record = record
        self.requests: list[ModelRequest] = []

    @property
    def info(self) -> ModelInfo:
        return self._info

    def add(self, *entries: ScriptEntry) -> None:
        self._script.extend(entries)

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self._record:
            self.requests.append(request)
        entry = self._next_entry()
        resolved = entry(request) if callable(entry) else entry
        if isinstance(resolved, AssistantMessage):
            yield StreamStart(partial=resolved)
            yield StreamEnd(message=resolved)
            return
        async for event in self._stream_reply(resolved, request):
            yield event

    def _next_entry(self) -> ScriptEntry:
        if self._script:
            return self._script.pop(0)
        if self._default is not None:
            return self._default
        return AssistantMessage(
            model=self._info.id,
            provider=self._info.provider,
            stop_reason="error",
            error_kind="other",
            error_message="ScriptedModel: the script has no more replies.",
        )

    async def _stream_reply(
        self, reply: Reply, request: ModelRequest
    ) -> AsyncIterator[StreamEvent]:
        partial = AssistantMessage(model=self._info.id, provider=self._info.provider)
        if reply.latency_s:
            await asyncio.sleep(reply.latency_s)
        yield StreamStart(partial=partial)
        if reply.thinking is not None:
            block = Thinking(thinking="")
            partial.content.append(block)
            index = len(partial.content) - 1
            for chunk in _chunks(reply.thinking, reply.chunk_size):
                await self._pause(reply)
                block.thinking += chunk
                yield ThinkingDelta(partial=partial, index=index, delta=chunk)
            block.signature = reply.thinking_signature
        if reply.text:
            text_block = Text(text="")
            partial.content.append(text_block)
            index = len(partial.content) - 1
            for chunk in _chunks(reply.text, reply.chunk_size):
                await self._pause(reply)
                text_block.text += chunk
                yield TextDelta(partial=partial, index=index, delta=chunk)
        for tool_call in reply.tool_calls:
            arguments = json.dumps(tool_call.arguments)
            placeholder = ToolCall(id=tool_call.id, name=tool_call.name, arguments={})
            partial.content.append(placeholder)
            index = len(partial.content) - 1
            for chunk in _chunks(arguments, reply.chunk_size):
                await self._pause(reply)
                yield ToolCallDelta(
                    partial=partial,
                    index=index,
                    tool_call_id=tool_call.id,
                    tool_name=tool_call.name,
                    json_delta=chunk,
                )
            placeholder.arguments = dict(tool_call.arguments)
        partial.stop_reason = reply.stop_reason or ("tool_use" if reply.tool_calls else "stop")
        partial.error_message = reply.error_message
        if partial.stop_reason == "error":
            partial.error_kind = "other"
        usage = reply.usage or Usage(input=len(request.messages) * 10, output=len(reply.text) // 4)
        usage.cost = cost_of(usage, self._info.prices)
        partial.usage = usage
        yield StreamEnd(message=partial)

    @staticmethod
    async def _pause(reply: Reply) -> None:
        if reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)


def _chunks(text: str, size: int) -> Iterable[str]:
    if not text:
        return
    for start in range(0, len(text), max(size, 1)):
        yield text[start : start + size]
