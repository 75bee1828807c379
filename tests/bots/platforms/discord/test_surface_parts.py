"""How a stretch of answer text becomes Discord messages (`split_parts`): only the text the shown
parts can hold is split, with exactly the parts splitting it whole would give."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.platforms.discord import surface_parts
from bots.platforms.discord.surface_parts import (
    MAX_PARTS_PER_BLOCK,
    MESSAGE_LIMIT,
    WRITING_TEXT,
    attached_text,
    continues,
    is_overflow_note,
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


def test_five_parts_of_a_prefix_are_an_overflow_whatever_follows() -> None:
    """Four full parts then a blank run: a prefix of five messages' worth holds exactly the
    four, yet the text goes on into a fifth. It overflows (not cut after the fourth)."""
    four = "\n\n".join("y" * 1_990 for _ in range(4))
    text = four + "\n" * 3_000 + "the fifth part"
    prefix = text[: (MAX_PARTS_PER_BLOCK + 1) * MESSAGE_LIMIT]
    assert len(split_markdown(prefix, MESSAGE_LIMIT)) == 4
    assert split_parts(text) == ([WRITING_TEXT], True)
    fits = four + "\n" * 3_000
    assert split_parts(fits) == (split_markdown(fits, MESSAGE_LIMIT), False)
    assert len(split_parts(fits)[0]) == 4


def test_only_five_messages_worth_of_a_huge_answer_is_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Called on every update of a stream: a 260 kB answer splits no more of its text than
    five messages hold (splitting all of it holds the event loop for tens of milliseconds)."""
    split: list[int] = []

    def counting(text: str, limit: int) -> list[str]:
        split.append(len(text))
        return split_markdown(text, limit)

    monkeypatch.setattr(surface_parts, "split_markdown", counting)
    text = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(700))
    assert split_parts(text) == ([WRITING_TEXT], True)
    assert split and sum(split) <= (MAX_PARTS_PER_BLOCK + 1) * MESSAGE_LIMIT
    split.clear()
    three = "\n\n".join("z" * 1_900 for _ in range(3))
    assert len(split_parts(three)[0]) == 3
    assert sum(split) == len(three), "a text the parts hold whole is split once"


def test_blank_text_shows_no_part() -> None:
    assert split_parts("") == ([], False)
    assert split_parts(" \n\n \t") == ([], False)
    assert split_parts(" x") == ([" x"], False)


def test_the_notes_of_a_long_answer_are_known_and_nothing_else_is() -> None:
    assert is_overflow_note(WRITING_TEXT)
    assert is_overflow_note(attached_text("word " * 3_000))
    assert attached_text("x" * 12_345).startswith("📄 A long answer (12,345 characters)")
    assert not is_overflow_note("📄 Notes from the meeting")
    assert not is_overflow_note(WRITING_TEXT + " ")
    assert not is_overflow_note("A long answer (3 characters)")
    assert not is_overflow_note("Paragraph 0: rivers")


def test_a_streamed_state_continues_the_part_it_grew_into() -> None:
    assert continues("Rivers flow", "Rivers flow downhill.")
    assert continues("Rivers flow downhill. More", "Rivers flow downhill.")  # grown past it
    assert not continues("Rivers run", "Rivers flow downhill.")
    assert not continues("", "Rivers flow downhill.")
    assert not continues("  \n", "Rivers flow downhill.")
    assert continues("Rivers flow  \n\n", "Rivers flow downhill.")  # trailing blanks aside


@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
def test_a_fence_a_split_closed_does_not_hide_that_a_part_continues(fence: str) -> None:
    """A part cut inside a code block ends with a closing fence line the split added; the
    streamed state, or the part it grew into, goes on inside the block."""
    earlier = f"Look:\n{fence}python\nprint(1)  \n{fence}"
    later = f"Look:\n{fence}python\nprint(1)  \nprint(2)\n{fence}"
    assert continues(earlier, later)
    assert continues(later, earlier)
    assert not continues(f"Look:\n{fence}python\nprint(3)\n{fence}", later)
    # Blanks before the added fence are no text either (the part's end was trimmed since).
    assert continues(f"Look:\n{fence}\nprint(1)   \n{fence}", f"Look:\n{fence}\nprint(1)")


def test_only_a_fence_line_is_taken_off_the_end() -> None:
    assert not continues("Rivers\nflow uphill", "Rivers\nflow downhill")
    assert not continues("Rivers\n`x`", "Rivers\nflow")  # code in a line is no fence
    assert not continues("Rivers\n`~`", "Rivers\nflow")  # nor a line mixing both markers
    assert continues("```", "```python\nprint(1)")  # a lone fence opener is text
    assert continues("Look:\n~~~", "Look:\n~~~python")
    # A part may begin indented (a nested list item): only the end is trimmed.
    indented = "  - item\n```\ncode"
    assert continues(f"{indented}\n```", f"{indented}\nmore\n```\nAfter the code.")
