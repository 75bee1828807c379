"""The console's Conversations, search, conversation and Feedback pages over a large database,
on SQLite and on PostgreSQL: `benchmarks.console` with `--pages conversations` (its seed,
traces included; its options; its JSON line, with the filtered list as
`conversations_filtered_p95_ms`).

Run: `uv run python -m benchmarks.console_conversations` (`--backends sqlite`, `--requests 50`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/console_conversations.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import console


def main() -> None:
    console.main(default_pages="conversations")


if __name__ == "__main__":
    main()
