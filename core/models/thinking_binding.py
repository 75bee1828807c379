"""Preserved thinking: is the signed thinking a request replays still bound to its prefix?

On the models that preserve thinking (`AnthropicModelSpec.preserved_thinking`), the API checks
every replayed `thinking` / `redacted_thinking` block against its prefix: the top-level
`system`, `tools` and every message before it. If any of that changed since the block was
produced, the block and every later one are invalid and the request is refused with a 400
(for accounts created since 2026-08-31) — the same history fails again forever — unless the
request sends `thinking.block_binding.prefix_mismatch_behavior = "drop_block"` with the beta
header below, and the API drops the invalid blocks instead (docs/architecture.md, "Preserved
thinking").

Teammate is append-only where it can be (memory and channel instructions are appended, never
edited into what was sent); where it cannot (a tool list changed, compaction replaced older
turns), the adapter must know, on each request, whether some replayed thinking is bound to a
prefix that is no longer there. This module tells it, without any state beyond the messages:
each reply records the digest of the request it answered (`AssistantMessage.prefix_digest`),
and a later request recomputes the digest at the reply's position and compares.

Owns: the canonical digest of a request's prefix as the API compares it (`cache_control` left
out: it marks a cache breakpoint, not content), the chain of digests before each message, and
the verdict (`BindingCheck`). Digests of large blocks are cached by identity (converted blocks
are reused request after request), so a turn does not re-hash a long history's images.

Must not: import the `anthropic` SDK, or change a block (digests only read).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

BINDING_BETA = "thinking-binding-controls-2026-08-01"
DROP_BLOCK: dict[str, str] = {"prefix_mismatch_behavior": "drop_block"}
# The error the API answers when a replayed block fails the prefix check.
BOUND_ELSEWHERE_HINT = "bound to a different conversation"
_VERSION = "v1"
_THINKING_TYPES = ("thinking", "redacted_thinking")

ApiBlock: TypeAlias = dict[str, Any]
ApiMessage: TypeAlias = dict[str, Any]


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _without_cache_control(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {key: item for key, item in block.items() if key != "cache_control"}
    return block


def frame_digest(system: Sequence[ApiBlock] | None, tools: Sequence[ApiBlock] | None) -> str:
    """The digest of what comes before every message: the system blocks and the tools."""
    frame = {
        "system": [_without_cache_control(block) for block in system or ()],
        "tools": [_without_cache_control(tool) for tool in tools or ()],
    }
    return hashlib.sha256(_canonical(frame)).hexdigest()


class BlockDigests:
    """Digests of API blocks, remembered by identity for blocks that are reused (the adapter's
    conversion cache hands out the same block objects every request). An entry keeps its block
    (so an id cannot be reused while it lives), so the entries are bounded by count and by the
    bytes of the blocks they keep alive, least recently used out first."""

    def __init__(self, max_entries: int = 65_536, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes_kept = 0
        self._entries: OrderedDict[int, tuple[ApiBlock, bytes, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def digest(self, block: ApiBlock) -> bytes:
        entry = self._entries.get(id(block))
        if entry is not None and entry[0] is block:
            self._entries.move_to_end(id(block))
            return entry[1]
        encoded = _canonical(_without_cache_control(block))
        value = hashlib.sha256(encoded).digest()
        size = len(encoded)
        if "cache_control" not in block and size <= self.max_bytes:  # a marked copy is new
            self._entries[id(block)] = (block, value, size)  # every request: not kept
            self.bytes_kept += size
            while len(self._entries) > self.max_entries or self.bytes_kept > self.max_bytes:
                self.bytes_kept -= self._entries.popitem(last=False)[1][2]
        return value


def prefix_chain(
    frame: str,
    messages: Sequence[ApiMessage],
    blocks: BlockDigests,
    at: Collection[int] | None = None,
) -> list[str]:
    """`chain[i]` names everything before `messages[i]` (the frame and messages 0..i-1);
    `chain[len(messages)]` names the whole request. A digest is `v1:<frame>:<messages>`, so a
    mismatch can be told apart: the frame (system or tools) or the messages changed. With
    `at`, only those positions and the whole request are named (the rest are "")."""
    running = hashlib.sha256(frame.encode())
    last = len(messages)

    def name(index: int) -> str:
        if at is not None and index != last and index not in at:
            return ""
        return f"{_VERSION}:{frame[:16]}:{running.copy().hexdigest()}"

    chain = [name(0)]
    for message in messages:
        running.update(b"\x1e" + str(message.get("role", "")).encode() + b"\x1f")
        content = message.get("content")
        if isinstance(content, str):
            running.update(hashlib.sha256(_canonical(content)).digest())
        else:
            for block in content or ():
                running.update(blocks.digest(block))
        chain.append(name(len(chain)))
    return chain


def carries_thinking(message: ApiMessage) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in _THINKING_TYPES for block in content
    )


@dataclass(slots=True)
class BindingCheck:
    """The verdict for one request: which replayed replies carry thinking whose prefix
    changed (`stale`), or whose prefix is unknown (`unknown`: stored before digests were kept,
    or merged into another reply), and whether the frame (system or tools) is what changed."""

    request_digest: str
    stale: list[int] = field(default_factory=list)  # API message indexes
    unknown: list[int] = field(default_factory=list)
    frame_changed: bool = False

    @property
    def needs_drop_block(self) -> bool:
        return bool(self.stale or self.unknown)

    def describe(self) -> str:
        parts = []
        if self.stale:
            what = "system prompt or tools" if self.frame_changed else "earlier messages"
            parts.append(f"{len(self.stale)} bound to a changed prefix ({what})")
        if self.unknown:
            parts.append(f"{len(self.unknown)} of unknown prefix")
        return ", ".join(parts)


def check_binding(
    frame: str,
    messages: Sequence[ApiMessage],
    recorded: dict[int, str | None],
    blocks: BlockDigests,
) -> BindingCheck:
    """Compare each replayed reply that carries thinking with the digest it recorded.
    `recorded` maps an API message index to the digest of the reply that starts it (None when
    the reply has none); an assistant message with thinking missing from it is unknown."""
    replayed = [
        index
        for index, message in enumerate(messages)
        if message.get("role") == "assistant" and carries_thinking(message)
    ]
    chain = prefix_chain(frame, messages, blocks, at=replayed)
    check = BindingCheck(request_digest=chain[-1])
    for index in replayed:
        digest = recorded.get(index)
        if digest is None:
            check.unknown.append(index)
        elif digest != chain[index]:
            check.stale.append(index)
            if digest.split(":")[1:2] != chain[index].split(":")[1:2]:
                check.frame_changed = True
    return check
