"""fit_request_images: a request's images stay within the API's rules, newest kept, the same
history giving the same bytes."""

from __future__ import annotations

import base64
import copy
import io
import json
from typing import Any

from PIL import Image as PILImage

from core.models.image_budget import (
    LEFT_OUT_TEXT,
    MAX_IMAGE_CHARS,
    MAX_REQUEST_IMAGE_CHARS,
    MAX_REQUEST_IMAGES,
    fit_request_images,
)


def png_b64(size: tuple[int, int] = (4, 4)) -> str:
    buffer = io.BytesIO()
    PILImage.new("RGB", size, (200, 30, 30)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def padded(data_b64: str, length: int) -> str:
    """`data_b64` made `length` characters long (a real header; the rest is filler)."""
    return data_b64 + "A" * (length - len(data_b64))


def image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def images_of(messages: list[dict[str, Any]]) -> list[str]:
    """The data of every image still sent, oldest first, tool results included."""
    found: list[str] = []
    for message in messages:
        for block in message["content"]:
            inner = block.get("content") if block["type"] == "tool_result" else [block]
            found += [b["source"]["data"] for b in inner if b["type"] == "image"]
    return found


def placeholders(messages: list[dict[str, Any]]) -> int:
    return json.dumps(messages).count(LEFT_OUT_TEXT)


def thread(count: int, length: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(count):
        messages.append(user(text(f"picture {n}"), image(padded(png_b64((n + 1, 1)), length))))
        messages.append({"role": "assistant", "content": [text(f"seen {n}")]})
    return messages


def test_a_request_within_the_rules_is_left_alone() -> None:
    messages = thread(5, 1000)
    before = copy.deepcopy(messages)
    fit_request_images(messages)
    assert messages == before


def test_newest_images_are_kept_within_the_total_and_older_ones_replaced() -> None:
    length = 3_000_000
    messages = thread(10, length)
    fit_request_images(messages)
    sent = images_of(messages)
    fits = MAX_REQUEST_IMAGE_CHARS // length
    assert len(sent) == fits
    assert sent == images_of(thread(10, length))[-fits:]  # the newest ones
    assert placeholders(messages) == 10 - fits
    assert sum(map(len, sent)) <= MAX_REQUEST_IMAGE_CHARS
    # The placeholder stands where the image was, as a non-empty text block.
    assert messages[0]["content"][1] == {"type": "text", "text": LEFT_OUT_TEXT}
    assert LEFT_OUT_TEXT.strip()


def test_at_most_a_hundred_images_and_small_sides_when_more_than_twenty() -> None:
    messages = thread(130, 200)
    fit_request_images(messages)
    assert len(images_of(messages)) == MAX_REQUEST_IMAGES
    assert placeholders(messages) == 30
    assert messages[-2]["content"][1]["type"] == "image"


def test_an_image_too_large_by_itself_is_replaced_and_older_ones_stay() -> None:
    huge = padded(png_b64(), MAX_IMAGE_CHARS + 4)
    tall = png_b64((10, 8001))
    wide_ok = png_b64((8000, 10))
    messages = [
        user(text("old"), image(png_b64((3, 3)))),
        {"role": "assistant", "content": [text("ok")]},
        user(text("new"), image(huge), image(tall), image(wide_ok)),
    ]
    fit_request_images(messages)
    assert images_of(messages) == [png_b64((3, 3)), wide_ok]
    assert placeholders(messages) == 2


def test_more_than_twenty_images_leave_out_those_over_2000_px() -> None:
    big = png_b64((2001, 20))
    messages = thread(20, 200)
    messages.append(user(text("one more"), image(big)))
    fit_request_images(messages)
    assert big not in images_of(messages) and len(images_of(messages)) == 20
    # With twenty in all, the same image may stay.
    messages = [*thread(19, 200), user(text("one more"), image(big))]
    fit_request_images(messages)
    assert big in images_of(messages)


def test_images_in_tool_results_count_and_are_replaced_without_touching_shared_blocks() -> None:
    length = 4_500_000  # four fit in the total, not five
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [text("a screenshot"), image(padded(png_b64(), length))],
    }
    shared = copy.deepcopy(result)
    messages = [
        user(text("look"), image(padded(png_b64((2, 2)), length))),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
        },
        user(result),
        {"role": "assistant", "content": [text("and more")]},
        user(*(image(padded(png_b64((n + 3, 1)), length)) for n in range(4))),
    ]
    fit_request_images(messages)
    assert placeholders(messages) == 2  # the tool result's image and the first one
    replaced = messages[2]["content"][0]
    assert replaced["content"] == [text("a screenshot"), text(LEFT_OUT_TEXT)]
    assert replaced["tool_use_id"] == "toolu_1"
    # The adapter's cached block was not changed: a new one took its place.
    assert result == shared and replaced is not result


def test_a_breakpoint_on_a_replaced_image_stays() -> None:
    marked = {
        **image(padded(png_b64(), MAX_IMAGE_CHARS + 4)),
        "cache_control": {"type": "ephemeral"},
    }
    messages = [user(text("x"), marked)]
    fit_request_images(messages)
    assert messages[0]["content"][1] == {
        "type": "text",
        "text": LEFT_OUT_TEXT,
        "cache_control": {"type": "ephemeral"},
    }


def test_the_same_history_gives_the_same_bytes() -> None:
    def build() -> list[dict[str, Any]]:
        return [*thread(40, 700000), user(image(png_b64((2500, 10))), text("last"))]

    first, second = build(), build()
    fit_request_images(first)
    fit_request_images(second)
    assert json.dumps(first) == json.dumps(second)
    # A later request of the same thread sends its older part exactly as before.
    third = [*build()[:-1], user(text("last"))]
    fit_request_images(third)
    assert json.dumps(third[:-1]) == json.dumps(first[:-1])


def test_images_by_url_count_but_are_not_measured() -> None:
    by_url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    messages = [user(text("x"), by_url), user(text("y"), image("0000" * 10))]
    fit_request_images(messages)
    assert messages[0]["content"][1] is by_url and placeholders(messages) == 0
