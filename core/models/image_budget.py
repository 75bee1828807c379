"""Keeping a request's images within the Messages API's per-request rules, whatever history holds.

Owns: `fit_request_images`, a pass over the API-form messages (the dicts the adapter builds)
that leaves out images a request must not carry, replacing each by a short text block.

The API refuses a whole request for one bad image (docs/PLATFORMS.md, "Anthropic Messages
API"): more than 5 MB of base64 in one image, a side over 8000 px (2000 px once a request holds
more than 20 images), a body over 32 MB. History keeps every image, so without this pass one
big photo (or many images over a long thread) would make every later request of that thread
fail. Newest images are kept first, up to `MAX_REQUEST_IMAGES` and `MAX_REQUEST_IMAGE_CHARS`
of base64 together (well under the body cap); everything older than the first image that does
not fit is left out. A single image that itself breaks a rule (stored before attachments were
fitted) is left out wherever it is.

The result depends on the messages alone (no clock, no cache, no randomness): the same history
gives the same bytes, which the API's prompt cache and its thinking-prefix checks rely on.

Must not: import `anthropic` or anything heavy (sizes come from `core.image_size`); mutate a
block or a nested list (the adapter shares them with its conversion cache): a changed message
gets a new content list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.image_size import base64_image_size

MAX_IMAGE_CHARS = 5_000_000  # base64 characters of one image (the API: "5 MB", on base64)
MAX_IMAGE_SIDE = 8000
MANY_IMAGES = 20  # a request with more images than this ...
MAX_MANY_IMAGES_SIDE = 2000  # ... takes no side over this
MAX_REQUEST_IMAGES = 100
# All images' base64 together: with text and JSON around it the body stays under 32 MB.
MAX_REQUEST_IMAGE_CHARS = 20_000_000
LEFT_OUT_TEXT = "[an earlier image was left out to keep the request within the API's limits]"

ApiDict = dict[str, Any]


@dataclass(slots=True)
class _Slot:
    """Where one image block is: `messages[message]["content"][block]`, or inside that
    tool_result's content at `inner`."""

    message: int
    block: int
    inner: int | None
    image: ApiDict
    size: tuple[int, int] | None = None


def fit_request_images(messages: list[ApiDict]) -> None:
    """Replace, in place, each image block of `messages` that the request must not carry by a
    text block saying an image was left out (see the module docstring for which)."""
    slots = _image_slots(messages)  # newest first
    kept: list[_Slot] = []
    left_out: list[_Slot] = []
    chars = 0
    full = False
    for slot in slots:
        length = _base64_length(slot.image)
        if full:
            left_out.append(slot)
            continue
        if length is not None:
            if length > MAX_IMAGE_CHARS:
                left_out.append(slot)  # breaks the rule by itself: not a reason to stop
                continue
            slot.size = base64_image_size(slot.image["source"]["data"])
            if slot.size is not None and max(slot.size) > MAX_IMAGE_SIDE:
                left_out.append(slot)
                continue
        if len(kept) >= MAX_REQUEST_IMAGES or chars + (length or 0) > MAX_REQUEST_IMAGE_CHARS:
            # Everything older goes too: one cut, which moves only forward as a thread grows,
            # changes the sent history less often than picking small old images to fill gaps.
            full = True
            left_out.append(slot)
            continue
        kept.append(slot)
        chars += length or 0
    if len(kept) > MANY_IMAGES:
        for slot in kept:
            if slot.size is not None and max(slot.size) > MAX_MANY_IMAGES_SIDE:
                left_out.append(slot)
    if left_out:
        _replace(messages, left_out)


def _image_slots(messages: list[ApiDict]) -> list[_Slot]:
    slots: list[_Slot] = []
    for m in range(len(messages) - 1, -1, -1):
        content = messages[m].get("content")
        if not isinstance(content, list):
            continue
        for b in range(len(content) - 1, -1, -1):
            block = content[b]
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                slots.append(_Slot(m, b, None, block))
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                inner = block["content"]
                for i in range(len(inner) - 1, -1, -1):
                    if isinstance(inner[i], dict) and inner[i].get("type") == "image":
                        slots.append(_Slot(m, b, i, inner[i]))
    return slots


def _base64_length(image: ApiDict) -> int | None:
    """The base64 length of an inline image; None for one given by URL or file id."""
    source = image.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        data = source.get("data")
        return len(data) if isinstance(data, str) else 0
    return None


def _replace(messages: list[ApiDict], slots: list[_Slot]) -> None:
    by_message: dict[int, list[_Slot]] = {}
    for slot in slots:
        by_message.setdefault(slot.message, []).append(slot)
    for m, gone in by_message.items():
        content = list(messages[m]["content"])
        top = {slot.block for slot in gone if slot.inner is None}
        nested: dict[int, set[int]] = {}
        for slot in gone:
            if slot.inner is not None:
                nested.setdefault(slot.block, set()).add(slot.inner)
        for b in top:
            content[b] = _placeholder(content[b])
        for b, inner in nested.items():
            result = content[b]
            content[b] = {
                **result,
                "content": [
                    _placeholder(part) if i in inner else part
                    for i, part in enumerate(result["content"])
                ],
            }
        messages[m] = {**messages[m], "content": content}


def _placeholder(image: ApiDict) -> ApiDict:
    block: ApiDict = {"type": "text", "text": LEFT_OUT_TEXT}
    if "cache_control" in image:  # a breakpoint stays where it was
        block["cache_control"] = image["cache_control"]
    return block
