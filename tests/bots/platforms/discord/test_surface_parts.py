"""How a stretch of answer text becomes Discord messages (`split_parts`): only the text the shown
parts can hold is split, with exactly the parts splitting it whole would give."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.platforms.discord.surface_parts import (
    MAX_PARTS_PER_BLOCK,
    MESSAGE_LIMIT,
    WRITING_TEXT,
    split_parts,
)
from bots.surface.markdown_split import split_markdown

PIECES = [
    "A sentence about rivers and the sea. " * 9,
    "word " * 700,  # a line longer than a message, broken at spaces
    "x" * 2_500,  # and one with no space at all
    "```python\n" + "\n".join(f"print({i})  # some code" for i in range(60)) + "\n```",
    "~~~\nunclosed fence " * 3,
    "\n" * 40,  # a run of blank lines, dropped between parts
    "- a list item\n- another item",
    "",
]


def split_whole(text: str) -> tuple[list[str], bool]:
    parts = split_markdown(text, MESSAGE_LIMIT) if text.strip() else []
    if len(parts) > MAX_PARTS_PER_BLOCK:
        return [WRITING_TEXT], True
    return parts, False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=120), st.integers(0, 3))
def test_parts_are_those_of_the_whole_text(pieces: list[str], glue: int) -> None:
    text = ("\n" * glue).join(pieces)
    assert split_parts(text) == split_whole(text)


def test_a_huge_answer_is_split_only_as_far_as_it_is_shown() -> None:
    text = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(700))  # 260 kB
    parts, overflows = split_parts(text)
    assert overflows and parts == [WRITING_TEXT]
    assert (parts, overflows) == split_whole(text)


def test_blank_lines_between_parts_fall_back_to_splitting_it_whole() -> None:
    # Blank lines are dropped between parts: a prefix of five messages' worth holds fewer.
    text = ("y" * 1_900 + "\n" * 2_000) * 6
    assert split_parts(text) == split_whole(text)
    assert split_parts(text)[1]  # overflows
