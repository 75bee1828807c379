"""Head and tail truncation at their exact limits."""

from __future__ import annotations

from tools.truncation import clip_utf8, truncate_head, truncate_tail


def test_head_exact_limits() -> None:
    exact = "".join(f"{i}\n" for i in range(2000))
    assert not truncate_head(exact).truncated
    over = exact + "2000\n"
    cut = truncate_head(over)
    assert (cut.truncated, cut.truncated_by, cut.output_lines, cut.total_lines) == (
        True, "lines", 2000, 2001
    )  # fmt: skip
    assert truncate_head("a" * 10, max_bytes=10).truncated is False
    assert truncate_head("a" * 11, max_bytes=10).first_line_too_long


def test_tail_keeps_the_end_and_clips_a_huge_last_line() -> None:
    text = "".join(f"{i}\n" for i in range(3000))
    cut = truncate_tail(text)
    assert cut.content.split("\n")[0] == "1000" and cut.output_lines == 2000
    huge = truncate_tail("start\n" + "é" * 40_000, max_bytes=1001)
    assert huge.partial_line and len(huge.content.encode()) <= 1001
    assert huge.content == "é" * 500


def test_clip_never_splits_a_character() -> None:
    assert clip_utf8("aé", 2) == "a"
    assert clip_utf8("éa", 2, keep="end") == "a"
