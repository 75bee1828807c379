"""Splitting long Markdown into platform-sized messages.

Owns: `split_markdown`. A split prefers a paragraph boundary, then a line boundary, then a
space; a code fence that a split cuts through is closed at the end of one part and reopened
(with its language) at the start of the next, so every part renders on its own.

Platform limits themselves (Slack's, Discord's) live in each platform's folder.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _opens(line: str) -> str | None:
    """The fence marker a line opens (``` or ~~~ …), if it opens one."""
    match = _FENCE.match(line)
    if match is None:
        return None
    marker, info = match.groups()
    if marker[0] == "`" and "`" in info:
        return None  # not a fence: backticks in the info string
    return marker


def _closes(line: str, marker: str) -> bool:
    stripped = line.strip()
    return (
        len(stripped) >= len(marker)
        and set(stripped) == {marker[0]}
        and len(line) - len(line.lstrip(" ")) <= 3
    )


def _open_fence(lines: list[str]) -> tuple[str, str] | None:
    """(opening line, marker) of the fence still open after `lines`, if any."""
    state: tuple[str, str] | None = None
    for line in lines:
        if state is None:
            marker = _opens(line)
            if marker is not None:
                state = (line, marker)
        elif _closes(line, state[1]):
            state = None
    return state


def _render(lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    text = "\n".join(lines)
    open_fence = _open_fence(lines)
    if open_fence is not None:
        text += "\n" + open_fence[1]
    return text


def _break_long_line(line: str, width: int) -> list[str]:
    """A line longer than `width` as several, broken at spaces where possible."""
    parts: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", width // 2, width)
        if cut <= 0:
            cut = width
        # No piece may start a code fence the line did not open (text then went missing into
        # an info string reopened in every later part): cut earlier instead.
        while cut > 1 and _FENCE.match(_rest(line, cut)):
            cut -= 1
        parts.append(line[:cut])
        line = _rest(line, cut)
    parts.append(line)
    return parts


def _rest(line: str, cut: int) -> str:
    """What follows a break of `line` at `cut` (a space it breaks at is dropped)."""
    return line[cut:].lstrip(" ") if line[cut : cut + 1] == " " else line[cut:]


def _fitting_prefix(block: list[str], limit: int) -> int:
    """How many lines of `block` fit in `limit` characters once rendered (at least one),
    preferring to end at a paragraph break outside code in the second half."""
    size = 0
    fits = 0
    marker: str | None = None
    best_break = 0
    for index, line in enumerate(block):
        size += len(line) + (1 if index else 0)
        # What closing an open fence would add at this point.
        closing = 0
        if marker is None:
            opened = _opens(line)
            if opened is not None:
                marker = opened
                closing = len(marker) + 1
        elif _closes(line, marker):
            marker = None
        else:
            closing = len(marker) + 1
        if size + closing > limit:
            break
        fits = index + 1
        if not line.strip() and marker is None:
            best_break = index + 1
    fits = max(fits, 1)
    return best_break if best_break * 2 > fits else fits


def split_markdown(text: str, limit: int) -> list[str]:
    """`text` as parts of at most `limit` characters, fences balanced in each part."""
    if limit < 40:
        raise ValueError("limit too small to split Markdown sensibly")
    text = text.strip("\n")
    if not text:
        return []
    if len(text) <= limit:
        return [text]
    lines: list[str] = []
    for line in text.split("\n"):
        lines.extend(_break_long_line(line, limit - 20))
    parts: list[str] = []
    carried_opener: str | None = None
    remaining = lines
    while remaining:
        block = ([carried_opener] if carried_opener is not None else []) + remaining
        if len(_render(block)) <= limit:
            parts.append(_render(block))
            break
        count = _fitting_prefix(block, limit)
        if carried_opener is not None and count <= 1:
            count = 2  # always move forward, even with a very long fence opener
        chunk = block[:count]
        parts.append(_render(chunk))
        open_fence = _open_fence(chunk)
        carried_opener = open_fence[0] if open_fence else None
        remaining = block[count:]
        while carried_opener is None and remaining and not remaining[0].strip():
            remaining = remaining[1:]
    return [piece for part in parts if part.strip() for piece in _hard_cut(part, limit)]


def _hard_cut(part: str, limit: int) -> list[str]:
    """The limit is a platform's: a part over it (a fence opener or marker so long that
    reopening it leaves no room) is cut plainly rather than refused or truncated."""
    return [part[start : start + limit] for start in range(0, len(part), limit)]
