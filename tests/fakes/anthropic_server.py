"""A fake Anthropic Messages API on 127.0.0.1, for the real `anthropic` SDK to talk to.

Owns: `FakeAnthropic` (an aiohttp server on a random port with a queue of scripted replies that
records every request it receives) and builders for realistic SSE streams and error replies.

It answers `POST /v1/messages` the way the API does on the wire: `text/event-stream` with an
`event: <type>` line before every `data:` line, `ping`s, cumulative usage in `message_delta`,
errors as JSON with `retry-after` headers, or as `event: error` in the middle of an HTTP 200
stream. It accepts `Authorization: Bearer` and `x-api-key`, and rejects requests the real API
rejects (a `tool_use` without its `tool_result`, empty or whitespace-only text, more than four
cache breakpoints, unsigned thinking, an unknown model id), so a test cannot pass on a request
the API would refuse.

Preserved thinking, as the API enforces it on the models that have it: every thinking block the
fake streams is bound to its prefix (the request's system, tools and messages, and the blocks of
the reply before it, `cache_control` left out). When a later request replays that block after
its prefix changed, it is invalid (so is every block produced before the change and replayed
after it: each one's prefix holds the change; a removal also takes the rest of that turn's
consecutive thinking blocks, as the API documents), while a block produced after the change
stays valid. An invalid block gets the API's 400 ("The block is bound to a different
conversation"), unless the request asks for `thinking.block_binding.prefix_mismatch_behavior =
"drop_block"` with the beta header `thinking-binding-controls-2026-08-01`, in which case the
invalid blocks are dropped, counted (`dropped_thinking`) and listed in `message_start`'s
`input_transformations`. Blocks the fake never produced (a history built by hand in a test) are
not checked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL = "claude-sonnet-5-5"
BINDING_BETA = "thinking-binding-controls-2026-08-01"
# Models whose replayed thinking is checked against its prefix (the preserved-thinking pages).
PRESERVED_THINKING_MODELS = frozenset(
    {
        "claude-sonnet-5-5",
        "claude-opus-5-5",
        "claude-haiku-5-5",
        "claude-fable-5-1",
        "claude-mythos-5-1",
        "claude-fable-5-2",
        "claude-mythos-5-2",
    }
)
# Models whose thinking text is omitted unless the request asks for `display: "summarized"`:
# their stream then carries the signature only (the text between tool calls included).
DISPLAY_OMITTED_MODELS = PRESERVED_THINKING_MODELS | {"claude-sonnet-5", "claude-opus-5"}
# Ids the API serves (the models overview, 2026-12); anything else is a 404, as there.
KNOWN_MODELS = frozenset(
    {
        *PRESERVED_THINKING_MODELS,
        "claude-sonnet-5",
        "claude-opus-5",
        "claude-fable-5",
        "claude-mythos-5",
        "claude-sonnet-4-6",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-opus-4-5",
        "claude-haiku-4-5",
    }
)
_SNAPSHOT = re.compile(r"-\d{8}$")


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # when it arrived (backoff checks)


@dataclass(slots=True)
class SSEReply:
    """An HTTP 200 event stream. `drop_after`: close the connection after that many events.
    `hang_after`: after that many events (0: before even the headers) go silent for `hang_s`
    seconds, as a stuck upstream does; the client's idle timeout should cut it."""

    events: list[tuple[str, dict[str, Any]]]
    headers: dict[str, str] = field(default_factory=dict)
    event_delay_s: float = 0.0
    drop_after: int | None = None
    hang_after: int | None = None
    hang_s: float = 120.0


@dataclass(slots=True)
class JSONReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


Reply = SSEReply | JSONReply


class FakeAnthropic:
    """Start with `await start()`, script with `add(...)`, inspect `requests`."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._replies: list[Reply] = []
        self._runner: web.AppRunner | None = None
        self.url = ""
        # Streams the client hung up on before they were complete.
        self.disconnects = 0
        self.stream_finished = asyncio.Event()
        # GET /v1/models/{id}: every id is an active model unless listed here.
        self.missing_models: set[str] = set()
        self.retired_models: set[str] = set()
        # POST /v1/messages refuses other model ids with a 404; tests of other ids add them.
        self.known_models: set[str] = set(KNOWN_MODELS)
        # Preserved thinking: (signature or data) -> the digests of the prefixes it was
        # produced after. A set, because a test may script the same block twice.
        self.bindings: dict[str, set[str]] = {}
        self.dropped_thinking = 0  # blocks dropped under drop_block, over all requests
        # Every error answered to POST /v1/messages, scripted or not, as (status, message):
        # an end-to-end test asserts that the API never refused what the adapter sent.
        self.errors: list[tuple[int, str]] = []

    def add(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def clear_replies(self) -> None:
        """Forget the scripted replies not used (a caller whose script went off course)."""
        self._replies.clear()

    @property
    def remaining(self) -> int:
        return len(self._replies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [request.body for request in self.requests]

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES * 2)  # over 32 MB: our 413
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models/{model_id}", self._model)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- the endpoint --------------------------------------------------------------------------

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        response = await self._answer(request)
        body = response.body if isinstance(response, web.Response) else None
        if response.status >= 400 and isinstance(body, bytes):
            error = json.loads(body).get("error") or {}
            self.errors.append((response.status, str(error.get("message", ""))))
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        size = request.content_length
        if (len(await request.read()) if size is None else size) > MAX_BODY_BYTES:
            return _json(error_reply(413, "request_too_large", REQUEST_TOO_LARGE))
        body = await request.json()
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                headers={name.lower(): value for name, value in request.headers.items()},
                body=body,
            )
        )
        key = _presented_key(request)
        if key is None or (self.api_key is not None and key != self.api_key):
            return _json(error_reply(401, "authentication_error", "invalid x-api-key"))
        problem = validate_request(body)
        if problem is not None:
            return _json(error_reply(400, "invalid_request_error", problem))
        model = str(body.get("model", ""))
        if _SNAPSHOT.sub("", model) not in self.known_models and model not in self.known_models:
            return _json(error_reply(404, "not_found_error", f"model: {model}"))
        transformations: list[dict[str, Any]] | None = None
        if model in PRESERVED_THINKING_MODELS or _SNAPSHOT.sub("", model) in (
            PRESERVED_THINKING_MODELS
        ):
            problem, dropped = self._prefix_check(body, request.headers)
            if problem is not None:
                return _json(error_reply(400, "invalid_request_error", problem))
            if _has_beta(request.headers, BINDING_BETA):
                transformations = dropped
            self.dropped_thinking += len(dropped)
        if not self._replies:
            return _json(
                error_reply(
                    500,
                    "api_error",
                    "FakeAnthropic: no scripted reply left",
                    headers={"x-should-retry": "false"},
                )
            )
        reply = self._replies.pop(0)
        if isinstance(reply, JSONReply):
            return _json(reply)
        return await self._stream(request, reply, body, transformations)

    # -- preserved thinking --------------------------------------------------------------------

    def _prefix_check(
        self, body: dict[str, Any], headers: Any
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """The API's check of replayed thinking: (the 400's message, or None; the blocks that
        drop_block removes)."""
        messages = body["messages"]
        invalid: list[str] = []
        for number, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            removing = False  # a removal takes the rest of the turn's consecutive thinking
            for position, block in enumerate(content):
                key = _binding_key(block)
                if key is None:
                    removing = False
                    continue
                bound = self.bindings.get(key)
                if not removing and bound is None:
                    continue  # not produced here (a history built by hand): not checked
                if removing or _prefix_digest(body, messages[:number], content[:position]) not in (
                    bound or set()
                ):
                    invalid.append(f"messages.{number}.content.{position}")
                    removing = True
        if not invalid:
            return None, []
        binding = (body.get("thinking") or {}).get("block_binding") or {}
        if binding.get("prefix_mismatch_behavior") == "drop_block":
            if not _has_beta(headers, BINDING_BETA):
                return (
                    "thinking.block_binding: this field requires the beta header "
                    f"`anthropic-beta: {BINDING_BETA}`",
                    [],
                )
            return None, [
                {"type": "thinking_dropped", "path": path, "reason": "prefix_binding_mismatch"}
                for path in invalid
            ]
        return (
            f"{invalid[0]}: Invalid `signature` in `thinking` block. The block is bound to a "
            "different conversation. Remove the block, or set "
            '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
        ), []

    def _bind(
        self, body: dict[str, Any], produced: list[dict[str, Any]], block: dict[str, Any]
    ) -> None:
        """Bind a thinking block the fake is streaming to its prefix: the request, and the
        blocks of this reply before it (merged into the request's last message when that is
        the assistant turn being continued)."""
        key = _binding_key(block)
        if key is None:
            return
        messages = list(body["messages"])
        earlier = list(produced)
        if messages and messages[-1].get("role") == "assistant":
            last = messages.pop()
            earlier = [*_blocks_of(last.get("content")), *earlier]
        self.bindings.setdefault(key, set()).add(_prefix_digest(body, messages, earlier))

    async def _model(self, request: web.Request) -> web.StreamResponse:
        model_id = request.match_info["model_id"]
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                headers={name.lower(): value for name, value in request.headers.items()},
                body={},
            )
        )
        key = _presented_key(request)
        if key is None or (self.api_key is not None and key != self.api_key):
            return _json(error_reply(401, "authentication_error", "invalid x-api-key"))
        if model_id in self.missing_models:
            return _json(error_reply(404, "not_found_error", f"model: {model_id}"))
        retired = model_id in self.retired_models
        info = {
            "type": "model",
            "id": model_id,
            "display_name": model_id,
            "created_at": "2026-01-01T00:00:00Z",
            "deprecated_at": "2026-06-01T00:00:00Z" if retired else None,
            "lifecycle": "retired" if retired else "active",
            "max_input_tokens": 1_000_000,
            "max_tokens": 128_000,
        }
        return web.json_response(info, content_type="application/json")

    async def _hang(self, request: web.Request, seconds: float) -> None:
        """Silence until `seconds` pass or the client hangs up (aiohttp does not cancel a
        handler whose client left, so look)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            transport = request.transport
            if transport is None or transport.is_closing():
                self.disconnects += 1
                self.stream_finished.set()
                raise ConnectionResetError("the client hung up on a silent stream")
            await asyncio.sleep(0.02)

    async def _stream(
        self,
        request: web.Request,
        reply: SSEReply,
        body: dict[str, Any],
        transformations: list[dict[str, Any]] | None,
    ) -> web.StreamResponse:
        if reply.hang_after == 0:
            await self._hang(request, reply.hang_s)
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                **reply.headers,
            },
        )
        await response.prepare(request)
        produced: list[dict[str, Any]] = []  # this reply's finished blocks, as replayed
        building: dict[int, dict[str, Any]] = {}
        display = (body.get("thinking") or {}).get("display")
        omitted = _SNAPSHOT.sub("", str(body.get("model"))) in DISPLAY_OMITTED_MODELS and (
            display != "summarized"
        )
        for sent, (event_type, data) in enumerate(reply.events):
            if omitted and data.get("delta", {}).get("type") == "thinking_delta":
                continue  # display omitted: the signature comes, the text does not
            if event_type == "message_start" and transformations is not None:
                data = {**data, "message": {**data["message"]}}
                data["message"]["input_transformations"] = transformations
            self._follow(body, event_type, data, building, produced)
            if reply.drop_after is not None and sent >= reply.drop_after:
                assert request.transport is not None
                request.transport.close()
                return response
            if reply.hang_after is not None and 0 < reply.hang_after == sent:
                await self._hang(request, reply.hang_s)
            payload = f"event: {event_type}\ndata: {json.dumps(data)}\n\n"
            try:
                if reply.event_delay_s:
                    await asyncio.sleep(reply.event_delay_s)
                await response.write(payload.encode())
            except (ConnectionError, asyncio.CancelledError):
                # aiohttp cancels the handler (or the write fails) when the client hangs up.
                self.disconnects += 1
                self.stream_finished.set()
                raise
        await response.write_eof()
        self.stream_finished.set()
        return response

    def _follow(
        self,
        body: dict[str, Any],
        event_type: str,
        data: dict[str, Any],
        building: dict[int, dict[str, Any]],
        produced: list[dict[str, Any]],
    ) -> None:
        """Rebuild the reply's blocks as the client will replay them, binding each thinking
        block to its prefix as it ends."""
        index = data.get("index")
        if event_type == "content_block_start" and isinstance(index, int):
            building[index] = {**data["content_block"], "_json": ""}
        elif event_type == "content_block_delta" and index in building:
            block, delta = building[index], data["delta"]
            kind = delta.get("type")
            if kind == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif kind == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif kind == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            elif kind == "input_json_delta":
                block["_json"] += delta["partial_json"]
        elif event_type == "content_block_stop" and index in building:
            block = building.pop(index)
            partial_json = block.pop("_json")
            if block.get("type") == "tool_use" and partial_json.strip():
                try:
                    block["input"] = json.loads(partial_json)
                except ValueError:
                    block["input"] = {}
            if block.get("type") in ("thinking", "redacted_thinking"):
                self._bind(body, produced, block)
            produced.append(block)


def _binding_key(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") == "thinking" and block.get("signature"):
        return f"t:{block['signature']}:{block.get('thinking', '')}"
    if block.get("type") == "redacted_thinking" and block.get("data"):
        return f"r:{block['data']}"
    return None


def _blocks_of(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def bare(value: Any) -> Any:
    """`value` without `cache_control` at any depth (a breakpoint is not content)."""
    if isinstance(value, dict):
        return {key: bare(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [bare(item) for item in value]
    return value


def _prefix_digest(
    body: dict[str, Any], messages: list[dict[str, Any]], earlier: list[dict[str, Any]]
) -> str:
    """What a thinking block is bound to: system, tools, the messages before its turn and the
    blocks of its turn before it. Written independently of the adapter's own digest, so the
    fake checks it rather than agreeing with it."""
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    turns = [
        {"role": message.get("role"), "content": _blocks_of(message.get("content"))}
        for message in messages
    ]
    if earlier:
        turns.append({"role": "assistant", "content": earlier})
    prefix = {"system": system, "tools": body.get("tools") or [], "messages": turns}
    encoded = json.dumps(bare(prefix), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def _has_beta(headers: Any, name: str) -> bool:
    values = headers.getall("anthropic-beta", []) if hasattr(headers, "getall") else []
    return any(name in (part.strip() for part in value.split(",")) for value in values)


def _presented_key(request: web.Request) -> str | None:
    authorization = request.headers.get("Authorization", "")
    if authorization.startswith("Bearer "):
        return authorization.removeprefix("Bearer ")
    return request.headers.get("x-api-key")


def _json(reply: JSONReply) -> web.Response:
    return web.Response(
        status=reply.status,
        body=json.dumps(reply.body).encode(),
        headers={"Content-Type": "application/json", "request-id": "req_fake", **reply.headers},
    )


def validate_request(body: dict[str, Any]) -> str | None:
    """What the real API would reject in `body`, as its error message; None if acceptable."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    breakpoints = 0
    for block in body.get("system") or []:
        if isinstance(block, dict) and "cache_control" in block:
            breakpoints += 1
        if isinstance(block, dict) and not str(block.get("text", "")).strip():
            return "system: text content blocks must contain non-whitespace text"
    for block in body.get("tools") or []:
        if "cache_control" in block:
            breakpoints += 1
    pending_tool_uses: list[str] = []
    for number, message in enumerate(messages):
        content = message.get("content")
        if not content:
            return f"messages.{number}: all messages must have non-empty content"
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if pending_tool_uses:
            if message["role"] != "user":
                return (
                    f"messages.{number}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(pending_tool_uses)}"
                )
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            missing = [tool_id for tool_id in pending_tool_uses if tool_id not in answered]
            if missing:
                return (
                    f"messages.{number}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}"
                )
            pending_tool_uses = []
        for block in blocks:
            if "cache_control" in block:
                breakpoints += 1
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                return f"messages.{number}: text content blocks must contain non-whitespace text"
            if kind == "tool_result" and isinstance(block.get("content"), list):
                for inner in block["content"]:
                    if not isinstance(inner, dict):
                        continue
                    if inner.get("type") == "text" and not str(inner.get("text", "")).strip():
                        return (
                            f"messages.{number}: text content blocks must contain "
                            "non-whitespace text"
                        )
            if kind == "thinking" and not block.get("signature"):
                return f"messages.{number}: thinking blocks must have a signature"
            if kind == "tool_use":
                if message["role"] != "assistant":
                    return f"messages.{number}: tool_use blocks belong to assistant messages"
                pending_tool_uses.append(block["id"])
            if kind == "tool_result" and message["role"] != "user":
                return f"messages.{number}: tool_result blocks belong to user messages"
    if pending_tool_uses:
        return "`tool_use` ids were found without `tool_result` blocks immediately after"
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    return image_problem(body)


# -- builders -------------------------------------------------------------------------------------


def error_reply(
    status: int, error_type: str, message: str, *, headers: dict[str, str] | None = None
) -> JSONReply:
    return JSONReply(
        status=status,
        body={
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": "req_fake",
        },
        headers=headers or {},
    )


def error_event(error_type: str, message: str) -> tuple[str, dict[str, Any]]:
    return "error", {"type": "error", "error": {"type": error_type, "message": message}}


@dataclass(slots=True)
class TextOut:
    text: str
    chunk_size: int = 5


@dataclass(slots=True)
class ThinkingOut:
    thinking: str
    signature: str
    chunk_size: int = 8


@dataclass(slots=True)
class ToolUseOut:
    id: str
    name: str
    json_chunks: list[str]


@dataclass(slots=True)
class RawBlockOut:
    """Any other block (e.g. a server tool's) sent in `content_block_start`, then its input as
    `input_json_delta` chunks if any are given."""

    block: dict[str, Any]
    json_chunks: list[str] = field(default_factory=list)


BlockOut = TextOut | ThinkingOut | ToolUseOut | RawBlockOut


def _chunks(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)] or [""]


def block_events(index: int, block: BlockOut) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []

    def delta(payload: dict[str, Any]) -> None:
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": payload},
            )
        )

    match block:
        case TextOut():
            start: dict[str, Any] = {"type": "text", "text": ""}
        case ThinkingOut():
            start = {"type": "thinking", "thinking": "", "signature": ""}
        case ToolUseOut():
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        case RawBlockOut():
            start = block.block
    events.append(
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
    )
    match block:
        case TextOut():
            for piece in _chunks(block.text, block.chunk_size):
                delta({"type": "text_delta", "text": piece})
        case ThinkingOut():
            for piece in _chunks(block.thinking, block.chunk_size):
                delta({"type": "thinking_delta", "thinking": piece})
            half = len(block.signature) // 2
            delta({"type": "signature_delta", "signature": block.signature[:half]})
            delta({"type": "signature_delta", "signature": block.signature[half:]})
        case ToolUseOut():
            for piece in block.json_chunks:
                delta({"type": "input_json_delta", "partial_json": piece})
        case RawBlockOut():
            for piece in block.json_chunks:
                delta({"type": "input_json_delta", "partial_json": piece})
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def message_start(
    *,
    input_tokens: int = 10,
    cache_read: int = 0,
    cache_write: int = 0,
    model: str = MODEL,
    message_id: str = "msg_fake",
) -> tuple[str, dict[str, Any]]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": cache_write,
                },
            },
        },
    )


def message_end(
    stop_reason: str,
    *,
    output_tokens: int = 20,
    usage: dict[str, int] | None = None,
    stop_details: dict[str, Any] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    delta: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": None}
    if stop_details is not None:
        delta["stop_details"] = stop_details
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": delta,
                "usage": {"output_tokens": output_tokens, **(usage or {})},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def sse(
    *blocks: BlockOut,
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 20,
    cache_read: int = 0,
    cache_write: int = 0,
    final_usage: dict[str, int] | None = None,
    stop_details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> SSEReply:
    """A complete, well-formed stream of `blocks`, with a `ping` as the real API sends one."""
    events = [
        message_start(input_tokens=input_tokens, cache_read=cache_read, cache_write=cache_write),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(blocks):
        events.extend(block_events(index, block))
    events.extend(
        message_end(
            stop_reason,
            output_tokens=output_tokens,
            usage=final_usage,
            stop_details=stop_details,
        )
    )
    return SSEReply(events=events, headers=headers or {})


def text_reply(text: str, *, chunk_size: int = 5, **kwargs: Any) -> SSEReply:
    return sse(TextOut(text, chunk_size=chunk_size), **kwargs)


def events_of(*parts: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [event for part in parts for event in part]


# -- images ----------------------------------------------------------------------------------------

MAX_BODY_BYTES = 32 * 1024 * 1024
REQUEST_TOO_LARGE = "Request exceeds the maximum allowed number of bytes."
# Stricter than the API's 5 MiB of base64 by design: what passes here passes there.
FAKE_MAX_IMAGE_CHARS = 5_000_000


def image_problem(body: dict[str, Any]) -> str | None:
    """What the real API would reject about the images of `body` (tool results' included), as
    its error message; None if acceptable. Sizes come from Pillow, independently of the code
    under test; data Pillow cannot read is let through (tests send stand-in bytes)."""
    import base64  # (imported here: this section is added to a file others edit)
    import binascii
    import io
    import warnings

    from PIL import Image as PILImage

    found: list[tuple[str, dict[str, Any]]] = []
    for number, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        for index, block in enumerate(content if isinstance(content, list) else []):
            where = f"messages.{number}.content.{index}"
            if block.get("type") == "image":
                found.append((where, block))
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for k, part in enumerate(inner if isinstance(inner, list) else []):
                if part.get("type") == "image":
                    found.append((f"{where}.content.{k}", part))
    if len(found) > 100:
        return f"messages: too many images in one request: {len(found)} > 100"
    max_side = 2000 if len(found) > 20 else 8000
    for where, block in found:
        source = block.get("source") or {}
        data = source.get("data")
        if source.get("type") != "base64" or not isinstance(data, str):
            continue
        if len(data) > FAKE_MAX_IMAGE_CHARS:
            return (
                f"{where}.image.source.base64: image exceeds 5 MB maximum: "
                f"{len(data)} bytes > {FAKE_MAX_IMAGE_CHARS} bytes"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
                with PILImage.open(io.BytesIO(base64.b64decode(data))) as image:
                    side = max(image.size)
        except PILImage.DecompressionBombError:
            side = 13_000  # over 179 megapixels: some side is over 8000
        except (binascii.Error, ValueError, OSError):
            continue
        if side > max_side:
            many = " for many-image requests" if max_side == 2000 else ""
            return (
                f"{where}.image.source.base64.data: At least one of the image dimensions exceed "
                f"max allowed size{many}: {max_side} pixels"
            )
    return None
