"""Bounding what one observation can put into the model's context.

Owns: `truncate_head` (keep the beginning: file reads) and `truncate_tail` (keep the end:
command output), both limited by lines and by UTF-8 bytes, whichever comes first, and
`format_size` for notices. Head truncation never cuts a line; tail truncation cuts a line only
when the last line alone is over the byte limit (then its end is kept, flagged as partial).

A "line" is text between newlines; a final newline does not start another line, so a file of
2000 newline-terminated lines has 2000 lines.

Must not: import anything of ours outside `core`; know about files or tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_BYTES = 50 * 1024


@dataclass(frozen=True, slots=True)
class Truncation:
    """The kept text and what was cut. Line counts refer to the input's lines."""

    content: str
    truncated: bool
    truncated_by: Literal["lines", "bytes"] | None
    total_lines: int
    total_bytes: int
    output_lines: int
    output_bytes: int
    # Head: the first line alone is over the byte limit (nothing kept).
    first_line_too_long: bool = False
    # Tail: the kept text starts inside a line (only the end of an over-long last line).
    partial_line: bool = False


def split_lines(text: str) -> list[str]:
    """Lines without their newline; a trailing newline does not add an empty line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _nbytes(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass"))


def truncate_head(
    text: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Keep whole lines from the start while within both limits."""
    lines = split_lines(text)
    total_bytes = _nbytes(text)
    if len(lines) <= max_lines and total_bytes <= max_bytes:
        return Truncation(text, False, None, len(lines), total_bytes, len(lines), total_bytes)
    kept: list[str] = []
    used = 0
    by: Literal["lines", "bytes"] = "lines"
    for line in lines:
        if len(kept) >= max_lines:
            by = "lines"
            break
        cost = _nbytes(line) + 1  # its newline
        if used + cost > max_bytes:
            by = "bytes"
            break
        kept.append(line)
        used += cost
    content = "\n".join(kept)
    first_too_long = not kept and bool(lines)
    return Truncation(
        content,
        True,
        by,
        len(lines),
        total_bytes,
        len(kept),
        _nbytes(content),
        first_line_too_long=first_too_long,
    )


def truncate_tail(
    text: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Keep whole lines from the end while within both limits; if the last line alone is too
    long, keep its last `max_bytes` bytes."""
    lines = split_lines(text)
    total_bytes = _nbytes(text)
    if len(lines) <= max_lines and total_bytes <= max_bytes:
        return Truncation(text, False, None, len(lines), total_bytes, len(lines), total_bytes)
    kept: list[str] = []
    used = 0
    by: Literal["lines", "bytes"] = "lines"
    for line in reversed(lines):
        if len(kept) >= max_lines:
            by = "lines"
            break
        cost = _nbytes(line) + (1 if kept else 0)
        if used + cost > max_bytes:
            by = "bytes"
            break
        kept.append(line)
        used += cost
    partial = False
    if not kept and lines:
        kept = [clip_utf8(lines[-1], max_bytes, keep="end")]
        partial = True
        by = "bytes"
    kept.reverse()
    content = "\n".join(kept)
    return Truncation(
        content,
        True,
        by,
        len(lines),
        total_bytes,
        len(kept),
        _nbytes(content),
        partial_line=partial,
    )


def clip_utf8(text: str, max_bytes: int, *, keep: Literal["start", "end"] = "start") -> str:
    """At most `max_bytes` UTF-8 bytes of `text`, never splitting a character."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    part = data[:max_bytes] if keep == "start" else data[len(data) - max_bytes :]
    return part.decode("utf-8", "ignore")


def format_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"
