"""The Messages API request for a `ModelRequest`: what AnthropicModel sends.

Owns: `RequestBuilder` (the parameters: the system prompt and tools as the first cache
breakpoint, the conversation with same-role neighbours merged and the second breakpoint on the
last user turn, thinking asked for, and the thinking-binding check that may ask the API to drop
replayed blocks), core messages as API blocks (images, tool results, thinking replayed only to
the model that signed it), and `ConversionCache`, which keeps converted messages within a
budget of bytes. No SDK types: plain dicts, as the SDK accepts them.

Must not: import `anthropic` (only core.models.anthropic does); know about the stream.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, TypeAlias

from core.messages import (
    AssistantMessage,
    Image,
    Message,
    ProviderBlock,
    RedactedThinking,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.base import ModelRequest, ToolSpec
from core.models.catalog import AnthropicModelSpec
from core.models.image_budget import fit_request_images
from core.models.thinking_binding import (
    BINDING_BETA,
    DROP_BLOCK,
    BindingCheck,
    BlockDigests,
    check_binding,
    frame_digest,
)

# The model's own logger: what a request does is logged where it always was.
log = logging.getLogger("core.models.anthropic")

PROVIDER = "anthropic"

ThinkingMode: TypeAlias = Literal["off", "adaptive"]
ApiBlock: TypeAlias = dict[str, Any]
ApiMessage: TypeAlias = dict[str, Any]

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
# Converted messages kept per model, in bytes of payload: base64 images count in full.
DEFAULT_CONVERSION_CACHE_BYTES = 64 * 1024 * 1024


class RequestBuilder:
    """One model's requests: its spec, thinking mode and default output limit, the messages it
    converted (`cache`) and the digests of the blocks it replayed (for the binding check)."""

    def __init__(
        self,
        spec: AnthropicModelSpec,
        *,
        thinking: ThinkingMode,
        max_tokens: int,
        conversion_cache_bytes: int,
    ) -> None:
        self._spec = spec
        self._info = spec.info
        self._thinking = thinking
        self._max_tokens = max_tokens
        self.cache = ConversionCache(conversion_cache_bytes)
        self._block_digests = BlockDigests()

    def build_params(self, request: ModelRequest) -> tuple[dict[str, Any], BindingCheck]:
        """The request's parameters, and what the binding check found: when some replayed
        thinking is bound to a prefix that changed (or is unknown), the request asks the API
        to drop the invalid blocks instead of refusing it (core.models.thinking_binding)."""
        messages, recorded = self.api_messages(request.messages)
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
            guard_thinking(params)
        return params, binding

    def api_messages(
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
        cached = self.cache.get(message)
        if cached is not None:
            return cached
        if isinstance(message, UserMessage):
            role, blocks = "user", _user_blocks(message)
        elif isinstance(message, ToolResultMessage):
            role, blocks = "user", [_tool_result_block(message)]
        else:
            role, blocks = "assistant", self.assistant_blocks(message)
        self.cache.put(message, role, blocks)
        return role, blocks

    def assistant_blocks(self, message: AssistantMessage) -> list[ApiBlock]:
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


def guard_thinking(params: dict[str, Any]) -> None:
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
