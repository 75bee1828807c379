"""What every `teammate` command shares: its settings, loaded once with the command line's
overrides first (`--model`, `--data-dir`), the log (on stderr too with `--verbose`), and the
one line on stderr that says why a command failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bots.app import setup_logging
from bots.settings import Settings, load_settings


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    return load_settings(**overrides)


def start_logging(settings: Settings, args: argparse.Namespace) -> None:
    setup_logging(settings, stderr=sys.stderr if args.verbose else None)


def fail(reason: str) -> None:
    sys.stderr.write(f"teammate: {reason}\n")
    sys.stderr.flush()
