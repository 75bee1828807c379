"""AnthropicModel: Claude through the official SDK's streaming Messages API.

Owns: translating core messages to the Messages API (prompt-cache breakpoints, merged tool
results, images, thinking replay), translating the stream back (text, thinking and signatures,
tool calls with argument deltas, usage and cost), the one stop-reason table, the one place that
maps SDK and transport failures to `ErrorKind`s, and retries.

Must not: raise for request, network or API failures (they end the stream as an error message),
swallow cancellation, or let the API key reach an error message. This is the only module that
imports `anthropic`.

Retries are ours, not the SDK's: the client is built with `max_retries=0` and one loop retries
429, 529/overloaded, 5xx, 408/409 and connection failures with backoff that honours
`retry-after-ms` / `retry-after`. The same loop retries an error that arrives mid-stream (HTTP 200
with `event: error`, e.g. `overloaded_error`) or a dropped connection, as long as nothing of that
attempt reached the consumer yet; after that a retry would repeat text, so the reply ends with
an error instead. One policy, one place, and its waits are injectable (`RetryPolicy.sleep`).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast

import anthropic
import httpx2
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    RedactedThinkingBlock,
    SignatureDelta,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from anthropic.types import TextDelta as ApiTextDelta
from anthropic.types import ThinkingDelta as ApiThinkingDelta

from core.messages import (
    AssistantMessage,
    ErrorKind,
    Image,
    Message,
    ProviderBlock,
    RedactedThinking,
    StopReason,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.models.base import (
    ModelInfo,
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
from core.models.catalog import DEFAULT_MODEL, anthropic_model_spec
from core.models.image_budget import fit_request_images
from core.models.thinking_binding import (
    BINDING_BETA,
    BOUND_ELSEWHERE_HINT,
    DROP_BLOCK,
    BindingCheck,
    BlockDigests,
    check_binding,
    frame_digest,
)

log = logging.getLogger(__name__)

PROVIDER = "anthropic"
DEFAULT_MAX_RETRIES = 4
DEFAULT_MAX_TOKENS = 32_000
DEFAULT_MAX_CONTINUATIONS = 5
DEFAULT_TIMEOUT_S = 600.0

ThinkingMode: TypeAlias = Literal["off", "adaptive"]
ApiBlock: TypeAlias = dict[str, Any]
ApiMessage: TypeAlias = dict[str, Any]

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
# Converted messages kept per model, in bytes of payload: base64 images count in full.
DEFAULT_CONVERSION_CACHE_BYTES = 64 * 1024 * 1024

# -- the stop-reason table ----------------------------------------------------------------------

# API stop reason -> (our stop reason, or "continue" to resume the turn; error kind; message).
_STOP_REASONS: dict[str, tuple[StopReason | Literal["continue"], ErrorKind | None, str | None]] = {
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


# -- retries ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before trying a failed call again.

    A server's `retry-after` is honoured up to `max_retry_after_s`; a longer wait is reported
    to the user instead of silently holding the conversation. Without one, the delay doubles
    from `initial_delay_s` up to `max_delay_s`, with jitter.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_retry_after_s: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def delay(self, retries_done: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number `retries_done + 1`, or None to give up."""
        if retries_done >= self.max_retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after_s else None
        backoff = min(self.initial_delay_s * 2.0**retries_done, self.max_delay_s)
        return backoff * (1.0 - 0.25 * random.random())


@dataclass(frozen=True, slots=True)
class _Failure:
    kind: ErrorKind
    message: str
    retryable: bool = False
    retry_after: float | None = None


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if given."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(float(value) * scale, 0.0)
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(float(email.utils.mktime_tz(parsed)) - time.time(), 0.0)
    return None


_OVERFLOW_HINTS = (
    "prompt is too long",
    "context window",
    "context length",
    "too many tokens",
    "exceed context limit",  # "input length and `max_tokens` exceed context limit: …"
)
_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


def _classify(exc: Exception) -> _Failure:
    """The one place that turns an SDK or transport failure into an error people can read."""
    if isinstance(exc, anthropic.APIStatusError):
        return _classify_status(exc)
    if isinstance(exc, anthropic.APITimeoutError):
        return _Failure("connection", "The request to Anthropic timed out.", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return _Failure("connection", "Could not reach the Anthropic API.", retryable=True)
    if isinstance(exc, httpx2.TransportError):
        return _Failure(
            "connection", "The connection to Anthropic broke off mid-reply.", retryable=True
        )
    if isinstance(exc, _IncompleteStream):
        return _Failure("connection", "Anthropic's reply ended before it was complete.", True)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return _Failure("other", "Anthropic sent a response this version cannot read.")
    if isinstance(exc, TypeError) and "authentication" in str(exc):
        return _Failure(
            "authentication", "No Anthropic API key is configured (set ANTHROPIC_API_KEY)."
        )
    log.error("unexpected failure calling Anthropic", exc_info=exc)
    return _Failure("other", f"Calling Anthropic failed unexpectedly ({type(exc).__name__}).")


def _classify_status(exc: anthropic.APIStatusError) -> _Failure:
    status = exc.status_code
    error_type = exc.type or ""
    detail = (exc.api_message or "").strip()
    headers = exc.response.headers
    retry_after = _retry_after(headers)
    should_retry = headers.get("x-should-retry")
    where = f"HTTP {status}" if status != 200 else "mid-reply"

    failure: _Failure
    if error_type == "overloaded_error" or status == 529:
        failure = _Failure("overloaded", f"Anthropic is overloaded right now ({where}).", True)
    elif error_type == "rate_limit_error" or status == 429:
        failure = _Failure("rate_limited", f"Anthropic's rate limit was reached ({where}).", True)
    elif error_type == "authentication_error" or status == 401:
        failure = _Failure(
            "authentication", "Anthropic rejected the API key (check ANTHROPIC_API_KEY)."
        )
    elif error_type == "permission_error" or status == 403:
        failure = _Failure(
            "authentication", "The Anthropic API key is not allowed to use this model."
        )
    elif error_type == "billing_error" or status == 402:
        failure = _Failure("other", "Anthropic refused the request for a billing reason.")
    elif status == 413 or str(error_type) == "request_too_large":
        # The 32 MB body cap (images, in practice), not the context window: compacting the
        # text would not help, and saying "too long" would mislead.
        failure = _Failure(
            "invalid_request",
            "The request was larger than Anthropic accepts (32 MB; usually images).",
        )
    elif BOUND_ELSEWHERE_HINT in detail.lower():
        failure = _Failure(
            "invalid_request",
            "Anthropic refused the conversation's earlier reasoning (its thinking is bound to "
            "a conversation that has since changed).",
        )
    elif any(hint in detail.lower() for hint in _OVERFLOW_HINTS):
        failure = _Failure(
            "context_overflow",
            "The conversation is too long for the model"
            + (f": {_short(detail)}" if detail else "."),
        )
    elif error_type in ("api_error", "timeout_error") or status >= 500 or status in (408, 409):
        failure = _Failure("server", f"Anthropic had an internal error ({where}).", True)
    elif error_type == "not_found_error" or status == 404:
        failure = _Failure(
            "invalid_request",
            "Anthropic does not know this model or endpoint"
            + (f": {_short(detail)}" if detail else "."),
        )
    else:
        failure = _Failure(
            "invalid_request",
            "Anthropic rejected the request"
            + (f": {_short(detail)}" if detail else f" ({where})."),
        )
    retryable = failure.retryable
    if should_retry == "false":
        retryable = False
    elif should_retry == "true":
        retryable = True
    return _Failure(failure.kind, failure.message, retryable, retry_after)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _IncompleteStream(Exception):
    """The SSE stream ended without `message_stop`."""


# -- the model ----------------------------------------------------------------------------------


class AnthropicModel:
    """A Claude model behind the `Model` contract.

    `api_key` and `base_url` default to the SDK's `ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL`.
    `thinking="adaptive"` asks for adaptive thinking where the model supports it; `"off"` does
    not ask (models that think by default still do: they reject `disabled`).
    `client` replaces the SDK client (tests pass one with `_strict_response_validation=True`);
    give it `max_retries=0`, or its retries stack on ours.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        thinking: ThinkingMode = "adaptive",
        max_tokens: int | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_continuations: int = DEFAULT_MAX_CONTINUATIONS,
        conversion_cache_bytes: int = DEFAULT_CONVERSION_CACHE_BYTES,
    ) -> None:
        self._spec = anthropic_model_spec(model)
        self._info = self._spec.info
        self._thinking = thinking
        self._max_tokens = max_tokens or min(DEFAULT_MAX_TOKENS, self._info.max_output_tokens)
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        self._max_continuations = max_continuations
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        )
        self._converted = ConversionCache(conversion_cache_bytes)
        self._block_digests = BlockDigests()

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def conversion_cache(self) -> ConversionCache:
        return self._converted

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (only needed when this model made it)."""
        await self._client.close()

    async def probe(self) -> str | None:
        """Check, cheaply and without generating, that this model is reachable with these
        credentials (`GET /v1/models/{id}`). None if it is, else a one-line reason."""
        try:
            info = await self._client.models.retrieve(self._info.id)
        except Exception as exc:
            return self._redact(_classify(exc).message)
        if info.lifecycle == "retired":
            return f"{self._info.id} is retired; choose another model (TEAMMATE_MODEL)."
        if info.lifecycle == "deprecated":
            log.warning("model %s is deprecated", self._info.id)
        return None

    # -- streaming -----------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> AssistantMessage:
        """The final message of `stream(request)`, for callers that don't need the deltas
        (e.g. summaries). Built from the stream: there is no second, non-streaming request."""
        final: AssistantMessage | None = None
        async for event in self.stream(request):
            if isinstance(event, StreamEnd):
                final = event.message
        assert final is not None, "stream() always ends with StreamEnd"
        return final

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        partial = AssistantMessage(model=self._info.id, provider=PROVIDER)
        yield StreamStart(partial=partial)
        try:
            params, binding = self._build_params(request)
        except Exception as exc:  # a message we cannot translate is still data, not a crash
            log.exception("could not build an Anthropic request")
            self._fail(partial, _Failure("invalid_request", f"Could not build the request: {exc}"))
            yield StreamEnd(message=partial)
            return
        # The reply is bound to the request as sent: recorded so a later request can tell
        # whether this reply's thinking is still bound to an unchanged prefix.
        partial.prefix_digest = binding.request_digest
        history: list[ApiMessage] = params["messages"]
        total = Usage()
        retries = 0
        continuations = 0
        while True:
            mark = len(partial.content)
            state = _ResponseState()
            reached_consumer = False
            try:
                events = await self._client.messages.create(**params, stream=True)
                async with events:
                    async for event in events:
                        for out in _apply(event, partial, state):
                            reached_consumer = True
                            yield out
                if not state.stopped:
                    raise _IncompleteStream
            except Exception as exc:  # CancelledError and GeneratorExit are not Exceptions
                failure = _classify(exc)
                if (
                    not reached_consumer
                    and "extra_headers" not in params
                    and self._spec.preserved_thinking
                    and isinstance(exc, anthropic.APIStatusError)
                    and BOUND_ELSEWHERE_HINT in (exc.api_message or "").lower()
                ):
                    # The digests said the prefix was unchanged, the API says otherwise (a
                    # change they cannot see): the same history would fail forever, so ask
                    # for the invalid blocks to be dropped instead, at once.
                    log.warning("Anthropic refused replayed thinking; retrying with drop_block")
                    _guard(params)
                    continue
                wait = None
                if failure.retryable and not reached_consumer:
                    wait = self._retry.delay(retries, failure.retry_after)
                if wait is None:
                    _finish_open_tool_calls(partial, state)
                    partial.usage = total + self._priced(state.usage)
                    self._fail(partial, failure, retries)
                    yield StreamEnd(message=partial)
                    return
                del partial.content[mark:]
                retries += 1
                log.warning(
                    "Anthropic %s (%s); retry %d/%d in %.2f s",
                    failure.kind,
                    failure.message,
                    retries,
                    self._retry.max_retries,
                    wait,
                )
                await self._retry.sleep(wait)
                continue

            # Each response priced on its own: long-prompt rates apply per request, so a few
            # resumed requests never add up past a threshold none of them crossed.
            total = total + self._priced(state.usage)
            _finish_open_tool_calls(partial, state)
            api_reason = state.stop_reason or "end_turn"
            ours, kind, text = _STOP_REASONS.get(api_reason, ("stop", None, None))
            if api_reason not in _STOP_REASONS:
                log.warning("unknown Anthropic stop reason %r, treated as stop", api_reason)
            if ours == "continue":
                continuations += 1
                if continuations > self._max_continuations:
                    partial.usage = total
                    self._fail(
                        partial,
                        _Failure(
                            "other",
                            f"Claude paused its turn {continuations} times without finishing; "
                            "stopped here.",
                        ),
                    )
                    yield StreamEnd(message=partial)
                    return
                # Send the conversation back with what was said so far; the API resumes the
                # same assistant turn and its blocks are appended to this message.
                resumed = self._assistant_blocks(partial)
                params["messages"] = (
                    [*history, {"role": "assistant", "content": resumed}] if resumed else history
                )
                retries = 0
                continue
            partial.usage = total
            if ours == "error":
                if state.refusal_explanation:
                    text = f"{text} ({_short(state.refusal_explanation, 200)})"
                self._fail(partial, _Failure(kind or "other", text or "The model stopped."))
            else:
                partial.stop_reason = ours
            yield StreamEnd(message=partial)
            return

    def _priced(self, usage: Usage) -> Usage:
        usage.cost = cost_of(usage, self._info.prices)
        return usage

    def _fail(self, partial: AssistantMessage, failure: _Failure, retries: int = 0) -> None:
        message = failure.message
        if retries:
            message += f" Tried {retries + 1} times."
        partial.stop_reason = "error"
        partial.error_kind = failure.kind
        partial.error_message = self._redact(message)

    def _redact(self, text: str) -> str:
        key = self._client.api_key
        if key:
            text = text.replace(key, "[redacted]")
        return _KEY_PATTERN.sub("[redacted]", text)

    # -- the request ---------------------------------------------------------------------------

    def _build_params(self, request: ModelRequest) -> tuple[dict[str, Any], BindingCheck]:
        """The request's parameters, and what the binding check found: when some replayed
        thinking is bound to a prefix that changed (or is unknown), the request asks the API
        to drop the invalid blocks instead of refusing it (core.models.thinking_binding)."""
        messages, recorded = self._api_messages(request.messages)
        # Within the per-request image rules whatever history holds (newest kept; the same
        # history gives the same bytes). A cut that moves is a changed prefix: the binding
        # check below sees it like any other.
        fit_request_images(messages)
        params: dict[str, Any] = {
            "model": self._info.id,
            "max_tokens": request.max_tokens or self._max_tokens,
            "messages": messages,
        }
        if request.system_prompt:
            # One text block, byte-identical every turn: the first cache breakpoint. What
            # changes between runs (memory, channel instructions) is appended to the
            # conversation instead, so no replayed thinking ever loses its prefix.
            params["system"] = [
                {"type": "text", "text": request.system_prompt, "cache_control": _EPHEMERAL}
            ]
        if request.tools:
            params["tools"] = [_api_tool(tool) for tool in request.tools]
        thinking: dict[str, Any] | None = None
        if self._thinking == "adaptive" and self._spec.adaptive_thinking:
            thinking = {"type": "adaptive"}
            if self._spec.display_omitted:
                # Off by default on these models, and the text they write between tool
                # calls comes inside thinking: without it people see nothing meanwhile.
                thinking["display"] = "summarized"
        if thinking is not None:
            params["thinking"] = thinking
        frame = frame_digest(params.get("system"), params.get("tools"))
        binding = check_binding(frame, messages, recorded, self._block_digests)
        if self._spec.preserved_thinking and binding.needs_drop_block:
            log.info(
                "replayed thinking on %s: %s; asking the API to drop invalid blocks",
                self._info.id,
                binding.describe(),
            )
            _guard(params)
        return params, binding

    def _api_messages(
        self, messages: list[Message]
    ) -> tuple[list[ApiMessage], dict[int, str | None]]:
        """The conversation in API form: same-role neighbours merged (tool results first in a
        user turn), empty messages left out, and the second cache breakpoint on the last block
        of the last user turn. Also, for each API message that a reply starts, the digest
        that reply recorded of its own request (`AssistantMessage.prefix_digest`)."""
        merged: list[ApiMessage] = []
        recorded: dict[int, str | None] = {}
        for message in messages:
            role, blocks = self._convert(message)
            if not blocks:
                continue
            if merged and merged[-1]["role"] == role:
                merged[-1]["content"].extend(blocks)
                recorded.pop(len(merged) - 1, None)  # two replies in one: their prefix unknown
            else:
                merged.append({"role": role, "content": list(blocks)})
                if isinstance(message, AssistantMessage):
                    recorded[len(merged) - 1] = message.prefix_digest
        for api_message in merged:
            if api_message["role"] == "user":
                content = api_message["content"]
                results = [b for b in content if b.get("type") == "tool_result"]
                if results and len(results) != len(content):
                    api_message["content"] = results + [
                        b for b in content if b.get("type") != "tool_result"
                    ]
        for api_message in reversed(merged):
            if api_message["role"] == "user":
                content = api_message["content"]
                content[-1] = {**content[-1], "cache_control": _EPHEMERAL}
                break
        return merged, recorded

    def _convert(self, message: Message) -> tuple[str, list[ApiBlock]]:
        cached = self._converted.get(message)
        if cached is not None:
            return cached
        if isinstance(message, UserMessage):
            role, blocks = "user", _user_blocks(message)
        elif isinstance(message, ToolResultMessage):
            role, blocks = "user", [_tool_result_block(message)]
        else:
            role, blocks = "assistant", self._assistant_blocks(message)
        self._converted.put(message, role, blocks)
        return role, blocks

    def _assistant_blocks(self, message: AssistantMessage) -> list[ApiBlock]:
        # Signed thinking is bound to the model that wrote it; from another model it goes back
        # as plain text (or not at all, when there is no text to show).
        same_model = message.provider in ("", PROVIDER) and message.model in ("", self._info.id)
        blocks: list[ApiBlock] = []
        for part in message.content:
            if isinstance(part, Text):
                if part.text.strip():  # the API refuses whitespace-only text blocks
                    blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, Thinking):
                if part.signature and same_model:
                    blocks.append(
                        {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
                    )
                elif part.thinking.strip():
                    blocks.append({"type": "text", "text": part.thinking})
            elif isinstance(part, RedactedThinking):
                if same_model:
                    blocks.append({"type": "redacted_thinking", "data": part.data})
            elif isinstance(part, ToolCall):
                blocks.append(
                    {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
                )
            elif isinstance(part, ProviderBlock) and part.provider == PROVIDER:
                blocks.append(part.data)
        return blocks


class ConversionCache:
    """Converted API blocks per message object, least recently used first out, within a budget
    of `max_bytes` of payload (text, base64 image data, tool arguments, roughly counted).

    Keyed by `id()`; the entry keeps the message itself, so its id cannot be reused while the
    entry lives. Messages are final once sent, so a hit is always still right. A message
    bigger than the whole budget is converted each time instead of evicting everything.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes_used = 0
        self._entries: dict[int, tuple[Message, str, list[ApiBlock], int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, message: Message) -> bool:
        entry = self._entries.get(id(message))
        return entry is not None and entry[0] is message

    def get(self, message: Message) -> tuple[str, list[ApiBlock]] | None:
        key = id(message)
        entry = self._entries.get(key)
        if entry is None or entry[0] is not message:
            return None
        self._entries[key] = self._entries.pop(key)  # now the most recently used
        return entry[1], entry[2]

    def put(self, message: Message, role: str, blocks: list[ApiBlock]) -> None:
        size = _payload_size(blocks)
        if size > self.max_bytes:
            return
        old = self._entries.pop(id(message), None)
        if old is not None:
            self.bytes_used -= old[3]
        while self._entries and self.bytes_used + size > self.max_bytes:
            oldest = next(iter(self._entries))
            self.bytes_used -= self._entries.pop(oldest)[3]
        self._entries[id(message)] = (message, role, blocks, size)
        self.bytes_used += size


def _payload_size(blocks: list[ApiBlock]) -> int:
    """About how many bytes `blocks` hold: string lengths plus a little per container. No
    recursion (tool arguments may nest deeply) and no copying (images are large)."""
    size = 0
    stack: list[Any] = [blocks]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, dict):
            size += 64
            for key, item in value.items():
                size += len(key) if isinstance(key, str) else 8
                stack.append(item)
        elif isinstance(value, list | tuple):
            size += 56 + 8 * len(value)
            stack.extend(value)
        else:
            size += 16
    return size


def _guard(params: dict[str, Any]) -> None:
    """Ask the API to drop replayed thinking that fails the prefix check instead of refusing
    the request (the beta header and `block_binding`; `thinking` is added if it was not sent:
    these models think adaptively by default, so that changes nothing else)."""
    thinking = dict(params.get("thinking") or {"type": "adaptive"})
    thinking["block_binding"] = dict(DROP_BLOCK)
    params["thinking"] = thinking
    params["extra_headers"] = {"anthropic-beta": BINDING_BETA}


def _api_tool(tool: ToolSpec) -> ApiBlock:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _content_blocks(content: str | list[Text | Image]) -> list[ApiBlock]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[ApiBlock] = []
    for part in content:
        if isinstance(part, Text):
            if part.text.strip():  # the API refuses empty and whitespace-only text blocks
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
                }
            )
    return blocks


def _user_blocks(message: UserMessage) -> list[ApiBlock]:
    # `author` is not sent: the runner writes attribution into the text it composes.
    return _content_blocks(message.content) or [{"type": "text", "text": "(empty message)"}]


def _tool_result_block(message: ToolResultMessage) -> ApiBlock:
    block: ApiBlock = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": _content_blocks(list(message.content))
        or [{"type": "text", "text": "(no output)"}],
    }
    if message.is_error:
        block["is_error"] = True
    return block


# -- the response --------------------------------------------------------------------------------


@dataclass(slots=True)
class _ResponseState:
    """One HTTP response's progress. Its blocks are appended to the message, after those of
    earlier responses when a `pause_turn` was resumed; `positions` maps its block indexes."""

    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    refusal_explanation: str | None = None
    stopped: bool = False
    positions: dict[int, int] = field(default_factory=dict)  # API index -> content index
    json_buffers: dict[int, str] = field(default_factory=dict)  # API index -> partial JSON


def _apply(
    event: RawMessageStreamEvent, partial: AssistantMessage, state: _ResponseState
) -> Iterator[StreamEvent]:
    """Fold one SSE event into `partial`; yield what the consumer should see."""
    if isinstance(event, RawContentBlockDeltaEvent):
        position = state.positions.get(event.index)
        if position is None:
            return
        block = partial.content[position]
        delta = event.delta
        if isinstance(delta, ApiTextDelta) and isinstance(block, Text):
            block.text += delta.text
            yield TextDelta(partial=partial, index=position, delta=delta.text)
        elif isinstance(delta, ApiThinkingDelta) and isinstance(block, Thinking):
            block.thinking += delta.thinking
            yield ThinkingDelta(partial=partial, index=position, delta=delta.thinking)
        elif isinstance(delta, SignatureDelta) and isinstance(block, Thinking):
            block.signature = (block.signature or "") + delta.signature
        elif isinstance(delta, InputJSONDelta):
            state.json_buffers[event.index] = (
                state.json_buffers.get(event.index, "") + delta.partial_json
            )
            if isinstance(block, ToolCall) and delta.partial_json:
                yield ToolCallDelta(
                    partial=partial,
                    index=position,
                    tool_call_id=block.id,
                    tool_name=block.name,
                    json_delta=delta.partial_json,
                )
        # citations_delta: citations are not kept (the text carries the answer).
    elif isinstance(event, RawContentBlockStartEvent):
        start = event.content_block
        if isinstance(start, TextBlock):
            partial.content.append(Text(text=start.text))
        elif isinstance(start, ThinkingBlock):
            partial.content.append(
                Thinking(thinking=start.thinking, signature=start.signature or None)
            )
        elif isinstance(start, RedactedThinkingBlock):
            partial.content.append(RedactedThinking(data=start.data))
        elif isinstance(start, ToolUseBlock):
            partial.content.append(ToolCall(id=start.id, name=start.name, arguments=start.input))
            state.json_buffers[event.index] = ""
        else:  # server tool use and results: kept verbatim for replay
            data = start.model_dump(mode="json", exclude_none=True)
            partial.content.append(ProviderBlock(provider=PROVIDER, data=data))
            if data.get("type") == "server_tool_use":
                state.json_buffers[event.index] = ""
        position = len(partial.content) - 1
        state.positions[event.index] = position
        if isinstance(start, ToolUseBlock):
            # Announce the call as soon as it starts, so people see it being written.
            yield ToolCallDelta(
                partial=partial,
                index=position,
                tool_call_id=start.id,
                tool_name=start.name,
                json_delta="",
            )
    elif isinstance(event, RawContentBlockStopEvent):
        _finish_block(partial, state, event.index)
    elif isinstance(event, RawMessageStartEvent):
        _note_transformations(getattr(event.message, "input_transformations", None))
        started = event.message.usage
        state.usage = Usage(
            input=started.input_tokens,
            output=started.output_tokens,
            cache_read=started.cache_read_input_tokens or 0,
            cache_write=started.cache_creation_input_tokens or 0,
        )
    elif isinstance(event, RawMessageDeltaEvent):
        # message_delta usage is cumulative for the response: replace, never add.
        so_far = event.usage
        state.usage.output = so_far.output_tokens
        if so_far.input_tokens is not None:
            state.usage.input = so_far.input_tokens
        if so_far.cache_read_input_tokens is not None:
            state.usage.cache_read = so_far.cache_read_input_tokens
        if so_far.cache_creation_input_tokens is not None:
            state.usage.cache_write = so_far.cache_creation_input_tokens
        if event.delta.stop_reason is not None:
            state.stop_reason = event.delta.stop_reason
        if event.delta.stop_details is not None:
            state.refusal_explanation = event.delta.stop_details.explanation
    elif isinstance(event, RawMessageStopEvent):
        state.stopped = True


def _note_transformations(transformations: Any) -> None:
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


def _finish_block(partial: AssistantMessage, state: _ResponseState, api_index: int) -> None:
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


def _finish_open_tool_calls(partial: AssistantMessage, state: _ResponseState) -> None:
    for api_index in list(state.json_buffers):
        _finish_block(partial, state, api_index)


def _parse_arguments(buffer: str) -> dict[str, Any]:
    try:
        parsed = json.loads(buffer)
    except ValueError:
        # Cut off by max_tokens: the loop never runs a `length` call, so {} is safe.
        log.info("tool call arguments are not complete JSON (%d chars)", len(buffer))
        return {}
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {}
