"""An answer's text as Discord messages (part of `bots.platforms.discord.surface`).

Owns: `Block` (one stretch of answer text between tool calls and the messages showing it),
`split_parts` (the messages a stretch shows as) and `continues` (whether a message found after
a restart is an earlier state of a part). Pure: no IO.

The long-answer rule: a stretch shows as up to `MAX_PARTS_PER_BLOCK` messages of at most 2,000
characters, split on paragraph or code-fence boundaries with fences balanced; a longer one as
one message, `WRITING_TEXT` while it is written, then `attached_text` with the whole stretch
attached to that same message as `OVERFLOW_FILE`. Exactly one copy either way: messages
streamed before the stretch grew too long are folded into that one message, not left beside
the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bots.platforms.discord.surface_posted import Posted
from bots.surface.markdown_split import split_markdown

MESSAGE_LIMIT = 2_000
# Four screens to scroll is as much as a thread should hold of one answer; four messages, the
# head's last edit and the buttons also fit Discord's 5 writes per 5 s per channel.
MAX_PARTS_PER_BLOCK = 4
OVERFLOW_FILE = "answer.md"
WRITING_TEXT = f"✍️ A long answer is being written; it will be attached here as `{OVERFLOW_FILE}`."
ATTACHED_MARK = "📄"


def attached_text(text: str) -> str:
    """What the one message of a stretch too long for messages says beside its file."""
    return (
        f"{ATTACHED_MARK} A long answer ({len(text):,} characters), attached as `{OVERFLOW_FILE}`."
    )


def is_overflow_note(content: str) -> bool:
    """Whether a message is the one showing a stretch too long for messages."""
    return content == WRITING_TEXT or content.startswith(f"{ATTACHED_MARK} A long answer (")


@dataclass(slots=True)
class Block:
    """One stretch of answer text between tool calls, shown as one or more messages."""

    text: str = ""
    posted: list[Posted] = field(default_factory=list)
    overflow_attached: bool = False


def split_parts(text: str) -> tuple[list[str], bool]:
    """The messages a stretch of answer text shows as, and whether it overflows: more than
    `MAX_PARTS_PER_BLOCK` parts show as one message (`WRITING_TEXT`, replaced by
    `attached_text` once the file is attached).

    Called on every update of a stream, so only the text those parts can hold is split (a
    model's longest answer, split whole, holds the event loop for tens of milliseconds). Every
    part of a prefix's split but the last is the text's own (the split is greedy, front to
    back), so if a prefix of one part more than fits splits into more parts than are shown,
    the text overflows; if it does not (blank lines dropped between parts), the text is split
    whole."""
    if not text.strip():
        return [], False
    prefix = text[: (MAX_PARTS_PER_BLOCK + 1) * MESSAGE_LIMIT]
    parts = split_markdown(prefix, MESSAGE_LIMIT)
    if len(parts) <= MAX_PARTS_PER_BLOCK and len(prefix) < len(text):
        parts = split_markdown(text, MESSAGE_LIMIT)
    if len(parts) > MAX_PARTS_PER_BLOCK:
        return [WRITING_TEXT], True
    return parts, False


def continues(shown: str, part: str) -> bool:
    """Could a message showing `shown` be an earlier state of `part` (the same place in a
    streamed answer: one is a prefix of the other, a fence closed at the end aside)?"""
    shown, part = _unfenced_end(shown), _unfenced_end(part)
    return bool(shown) and (part.startswith(shown) or shown.startswith(part))


def _unfenced_end(text: str) -> str:
    """`text` without trailing blanks and a closing fence line (added by a split)."""
    text = text.rstrip()
    head, _, last = text.rpartition("\n")
    if head and set(last.strip()) in ({"`"}, {"~"}):  # one marker's characters: a fence
        return head.rstrip()
    return text
