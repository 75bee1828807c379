"""The `teammate` command."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="teammate",
        description=(
            "Teammate: a team's shared AI assistant for Slack, Discord and the terminal. "
            "Adapters and commands arrive part by part; this build has the agent core."
        ),
    )


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
