"""Shared surface helpers: Markdown splitting with balanced fences, and throttled updates."""

from __future__ import annotations

import asyncio
import itertools
import re

import pytest

from bots.surface.markdown_split import split_markdown
from bots.surface.throttle import Throttle


def fences_balanced(part: str) -> bool:
    return len(re.findall(r"^ {0,3}(?:```|~~~)", part, flags=re.MULTILINE)) % 2 == 0


def test_short_text_is_one_part() -> None:
    assert split_markdown("hello\n\nworld", 100) == ["hello\n\nworld"]
    assert split_markdown("\n\n", 100) == []


def test_splits_at_paragraph_boundaries_within_the_limit() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 30 for i in range(10)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    parts = split_markdown(text, 400)
    assert all(len(p) <= 400 for p in parts)
    assert len(parts) > 1
    for part in parts:  # no paragraph is cut in two
        assert part.startswith("Paragraph") and part.endswith("word")
    assert "\n\n".join(parts) == text


def test_a_fence_cut_by_a_split_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"print({i})  # line {i}" for i in range(60))
    text = f"Here is the script:\n\n```python\n{code}\n```\n\nThat is all."
    parts = split_markdown(text, 500)
    assert len(parts) >= 3
    assert all(len(p) <= 500 for p in parts)
    assert all(fences_balanced(p) for p in parts)
    assert parts[1].startswith("```python\n")
    # Nothing lost: every code line appears exactly once.
    joined = "\n".join(parts)
    for i in range(60):
        assert joined.count(f"print({i})  # line {i}") == 1
    assert parts[-1].endswith("That is all.")


def test_tilde_fences_and_long_lines_are_handled() -> None:
    text = "~~~\n" + "x" * 1500 + "\n~~~\n" + "word " * 400
    parts = split_markdown(text, 300)
    assert all(len(p) <= 300 for p in parts)
    assert all(fences_balanced(p) for p in parts)
    assert "".join(p.replace("~~~", "").replace("\n", "") for p in parts).count("x") == 1500


@pytest.mark.parametrize("limit", [40, 100, 2000])
def test_every_part_within_limit_for_mixed_content(limit: int) -> None:
    text = (
        "# Title\n\nSome *text* here.\n\n```js\nconst a = 1;\n" + "a++;\n" * 200 + "```\n\n"
        "- item\n" * 50 + "\n" + "tail " * 500
    )
    parts = split_markdown(text, limit)
    assert all(len(p) <= limit for p in parts), max(len(p) for p in parts)
    assert all(fences_balanced(p) for p in parts)


async def test_throttle_coalesces_requests_and_drain_flushes_the_final_state() -> None:
    state = {"value": 0}
    seen: list[int] = []

    async def flush() -> None:
        seen.append(state["value"])

    throttle = Throttle(flush, interval_s=0.05)
    for value in range(1, 101):
        state["value"] = value
        throttle.request()
        if value % 20 == 0:
            await asyncio.sleep(0.01)
    await throttle.drain()
    assert seen[-1] == 100  # the final state is always shown
    assert len(seen) <= 4  # ~0.05 s of requests: a handful of flushes, not 100
    await throttle.close()


async def test_throttle_respects_the_interval_between_flushes() -> None:
    stamps: list[float] = []
    loop = asyncio.get_running_loop()

    async def flush() -> None:
        stamps.append(loop.time())

    throttle = Throttle(flush, interval_s=0.1)
    for _ in range(3):
        throttle.request()
        await throttle.drain()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) == 3
    assert all(gap >= 0.095 for gap in gaps), gaps


async def test_a_failing_flush_does_not_wedge_drain() -> None:
    calls = 0

    async def flush() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("rate limited")

    throttle = Throttle(flush, interval_s=0.01)
    throttle.request()
    await asyncio.wait_for(throttle.drain(), 1)
    throttle.request()
    await asyncio.wait_for(throttle.drain(), 1)
    assert calls == 2
    await throttle.close()


def test_breaking_a_long_line_never_starts_a_code_fence_it_did_not_have() -> None:
    # Found by the property test (tests/chaos/test_hostile_input.py): a line broken just
    # before a ``` in its middle made a piece that opened a fence, whose "info string" (the
    # rest of that piece) was then reopened in every later part: text shown many times over.
    text = "x" * 300 + "```" + "y" * 300
    parts = split_markdown(text, 40)
    assert all(len(part) <= 40 for part in parts)
    assert "".join(parts).replace("\n", "") == text  # every character once, in order
