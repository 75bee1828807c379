"""What may be written to a person's terminal.

Owns: `printable`, which leaves out what a terminal would act on instead of showing, and the
usage line `/usage` prints. Must not: change anything else about the text (its words, newlines
and tabs stay).
"""

from __future__ import annotations

import re

from core.messages import Usage

# What a terminal would obey rather than show: C0 controls but newline and tab (ESC starts
# colour, cursor, title and clipboard sequences), DEL, C1 controls, and the bidirectional
# overrides that make text read differently from what it is. Tool results, MCP servers' names
# and the model's own text are not ours: they never write these to a person's terminal.
_TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """`text` with nothing a terminal would act on (see `_TERMINAL_CONTROLS`)."""
    return _TERMINAL_CONTROLS.sub("", text)


def usage_line(usage: Usage) -> str:
    return (
        f"{usage.total_tokens:,} tokens (input {usage.input:,}, output {usage.output:,}, "
        f"cache read {usage.cache_read:,}, cache write {usage.cache_write:,}) · "
        f"${usage.cost:.4f}"
    )
