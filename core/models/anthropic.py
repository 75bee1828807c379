"""AnthropicModel: Claude through the official SDK's streaming Messages API.

Owns: the SDK client and the one retry loop around it, reading the stream (text, thinking and
signatures, tool calls with argument deltas, usage and cost, `pause_turn` resumed), telling the
SDK's and transport's failures apart (`_classify`), and the probe. What it builds on, none of
which imports the SDK: the request (core.models.anthropic_request: prompt-cache breakpoints,
merged tool results, images, thinking replay and binding), a response's state and the one
stop-reason table (core.models.anthropic_response), and failures' wording and the retry policy
(core.models.anthropic_failures). Their public names are re-exported here.

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

import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

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
    Message,
    ProviderBlock,
    RedactedThinking,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from core.models.anthropic_failures import (
    DEFAULT_MAX_RETRIES,
    Failure,
    IncompleteStream,
    RetryPolicy,
    failure_for_status,
    short,
)
from core.models.anthropic_request import (
    DEFAULT_CONVERSION_CACHE_BYTES,
    PROVIDER,
    ApiBlock,
    ApiMessage,
    ConversionCache,
    RequestBuilder,
    ThinkingMode,
    guard_thinking,
)
from core.models.anthropic_response import (
    STOP_REASONS,
    ReplyProgress,
    ResponseState,
    finish_block,
    finish_open_tool_calls,
    note_transformations,
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
    cost_of,
)
from core.models.catalog import DEFAULT_MODEL, anthropic_model_spec
from core.models.thinking_binding import BOUND_ELSEWHERE_HINT, BindingCheck

__all__ = [
    "DEFAULT_CONVERSION_CACHE_BYTES",
    "DEFAULT_MAX_CONTINUATIONS",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "PROVIDER",
    "AnthropicModel",
    "ApiBlock",
    "ApiMessage",
    "ConversionCache",
    "RetryPolicy",
    "ThinkingMode",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 32_000
DEFAULT_MAX_CONTINUATIONS = 5
DEFAULT_TIMEOUT_S = 600.0

_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


# -- failures -----------------------------------------------------------------------------------


def _classify(exc: Exception) -> Failure:
    """The one place that turns an SDK or transport failure into an error people can read."""
    if isinstance(exc, anthropic.APIStatusError):
        detail = (exc.api_message or "").strip()
        return failure_for_status(exc.status_code, exc.type or "", detail, exc.response.headers)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure("connection", "The request to Anthropic timed out.", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure("connection", "Could not reach the Anthropic API.", retryable=True)
    if isinstance(exc, httpx2.TransportError):
        return Failure(
            "connection", "The connection to Anthropic broke off mid-reply.", retryable=True
        )
    if isinstance(exc, IncompleteStream):
        return Failure("connection", "Anthropic's reply ended before it was complete.", True)
    if isinstance(exc, anthropic.APIResponseValidationError):
        return Failure("other", "Anthropic sent a response this version cannot read.")
    if isinstance(exc, TypeError) and "authentication" in str(exc):
        return Failure(
            "authentication", "No Anthropic API key is configured (set ANTHROPIC_API_KEY)."
        )
    log.error("unexpected failure calling Anthropic", exc_info=exc)
    return Failure("other", f"Calling Anthropic failed unexpectedly ({type(exc).__name__}).")


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
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        self._max_continuations = max_continuations
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s
        )
        self._requests = RequestBuilder(
            self._spec,
            thinking=thinking,
            max_tokens=max_tokens or min(DEFAULT_MAX_TOKENS, self._info.max_output_tokens),
            conversion_cache_bytes=conversion_cache_bytes,
        )

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def conversion_cache(self) -> ConversionCache:
        return self._requests.cache

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
            self._fail(partial, Failure("invalid_request", f"Could not build the request: {exc}"))
            yield StreamEnd(message=partial)
            return
        # The reply is bound to the request as sent: recorded so a later request can tell
        # whether this reply's thinking is still bound to an unchanged prefix.
        partial.prefix_digest = binding.request_digest
        progress = ReplyProgress(history=params["messages"])
        while True:
            mark = len(partial.content)
            state = ResponseState()
            reached_consumer = False
            try:
                events = await self._client.messages.create(**params, stream=True)
                async with events:
                    async for event in events:
                        for out in _apply(event, partial, state):
                            reached_consumer = True
                            yield out
                if not state.stopped:
                    raise IncompleteStream
            except Exception as exc:  # CancelledError and GeneratorExit are not Exceptions
                failure = _classify(exc)
                if not reached_consumer and self._thinking_refused(exc, params):
                    # The digests said the prefix was unchanged, the API says otherwise (a
                    # change they cannot see): the same history would fail forever, so ask
                    # for the invalid blocks to be dropped instead, at once.
                    log.warning("Anthropic refused replayed thinking; retrying with drop_block")
                    guard_thinking(params)
                    continue
                wait = None
                if failure.retryable and not reached_consumer:
                    wait = self._retry.delay(progress.retries, failure.retry_after)
                if wait is None:
                    finish_open_tool_calls(partial, state)
                    partial.usage = progress.total + self._priced(state.usage)
                    self._fail(partial, failure, progress.retries)
                    yield StreamEnd(message=partial)
                    return
                del partial.content[mark:]
                await self._wait_to_retry(failure, progress, wait)
                continue
            if self._resumed(partial, state, progress, params):
                continue
            yield StreamEnd(message=partial)
            return

    def _thinking_refused(self, exc: Exception, params: dict[str, Any]) -> bool:
        """Whether the API refused replayed thinking the binding check let through (not yet
        asked to drop invalid blocks)."""
        return (
            "extra_headers" not in params
            and self._spec.preserved_thinking
            and isinstance(exc, anthropic.APIStatusError)
            and BOUND_ELSEWHERE_HINT in (exc.api_message or "").lower()
        )

    async def _wait_to_retry(self, failure: Failure, progress: ReplyProgress, wait: float) -> None:
        progress.retries += 1
        log.warning(
            "Anthropic %s (%s); retry %d/%d in %.2f s",
            failure.kind,
            failure.message,
            progress.retries,
            self._retry.max_retries,
            wait,
        )
        await self._retry.sleep(wait)

    def _resumed(
        self,
        partial: AssistantMessage,
        state: ResponseState,
        progress: ReplyProgress,
        params: dict[str, Any],
    ) -> bool:
        """Settle a response that ended: True when it paused its turn and the next request
        resumes it (`params` rewritten), False when `partial` is final."""
        # Each response priced on its own: long-prompt rates apply per request, so a few
        # resumed requests never add up past a threshold none of them crossed.
        progress.total = progress.total + self._priced(state.usage)
        finish_open_tool_calls(partial, state)
        api_reason = state.stop_reason or "end_turn"
        ours, kind, text = STOP_REASONS.get(api_reason, ("stop", None, None))
        if api_reason not in STOP_REASONS:
            log.warning("unknown Anthropic stop reason %r, treated as stop", api_reason)
        if ours == "continue":
            progress.continuations += 1
            if progress.continuations > self._max_continuations:
                partial.usage = progress.total
                self._fail(
                    partial,
                    Failure(
                        "other",
                        f"Claude paused its turn {progress.continuations} times without "
                        "finishing; stopped here.",
                    ),
                )
                return False
            # Send the conversation back with what was said so far; the API resumes the
            # same assistant turn and its blocks are appended to this message.
            resumed = self._requests.assistant_blocks(partial)
            params["messages"] = (
                [*progress.history, {"role": "assistant", "content": resumed}]
                if resumed
                else progress.history
            )
            progress.retries = 0
            return True
        partial.usage = progress.total
        if ours == "error":
            if state.refusal_explanation:
                text = f"{text} ({short(state.refusal_explanation, 200)})"
            self._fail(partial, Failure(kind or "other", text or "The model stopped."))
        else:
            partial.stop_reason = ours
        return False

    def _priced(self, usage: Usage) -> Usage:
        usage.cost = cost_of(usage, self._info.prices)
        return usage

    def _fail(self, partial: AssistantMessage, failure: Failure, retries: int = 0) -> None:
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

    # -- the request (core.models.anthropic_request) ---------------------------------------------

    def _build_params(self, request: ModelRequest) -> tuple[dict[str, Any], BindingCheck]:
        # Here as well as on the builder: tests look at a request as this model builds it.
        return self._requests.build_params(request)

    def _api_messages(
        self, messages: list[Message]
    ) -> tuple[list[ApiMessage], dict[int, str | None]]:
        return self._requests.api_messages(messages)


# -- the stream ---------------------------------------------------------------------------------


def _apply(
    event: RawMessageStreamEvent, partial: AssistantMessage, state: ResponseState
) -> Iterator[StreamEvent]:
    """Fold one SSE event into `partial`; yield what the consumer should see."""
    if isinstance(event, RawContentBlockDeltaEvent):
        yield from _apply_delta(event, partial, state)
    elif isinstance(event, RawContentBlockStartEvent):
        yield from _apply_block_start(event, partial, state)
    elif isinstance(event, RawContentBlockStopEvent):
        finish_block(partial, state, event.index)
    elif isinstance(event, RawMessageStartEvent):
        _apply_message_start(event, state)
    elif isinstance(event, RawMessageDeltaEvent):
        _apply_message_delta(event, state)
    elif isinstance(event, RawMessageStopEvent):
        state.stopped = True


def _apply_delta(
    event: RawContentBlockDeltaEvent, partial: AssistantMessage, state: ResponseState
) -> Iterator[StreamEvent]:
    """More of a block: text, thinking, a signature or a tool call's JSON."""
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


def _apply_block_start(
    event: RawContentBlockStartEvent, partial: AssistantMessage, state: ResponseState
) -> Iterator[StreamEvent]:
    """A new block, appended to the message; a tool call is announced as it starts."""
    start = event.content_block
    if isinstance(start, TextBlock):
        partial.content.append(Text(text=start.text))
    elif isinstance(start, ThinkingBlock):
        partial.content.append(Thinking(thinking=start.thinking, signature=start.signature or None))
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


def _apply_message_start(event: RawMessageStartEvent, state: ResponseState) -> None:
    note_transformations(getattr(event.message, "input_transformations", None))
    started = event.message.usage
    state.usage = Usage(
        input=started.input_tokens,
        output=started.output_tokens,
        cache_read=started.cache_read_input_tokens or 0,
        cache_write=started.cache_creation_input_tokens or 0,
    )


def _apply_message_delta(event: RawMessageDeltaEvent, state: ResponseState) -> None:
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
