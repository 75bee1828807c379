"""`python -m bots.cli`: the `teammate` command (how the tests and benchmarks start it)."""

from __future__ import annotations

import os
import sys

from bots.cli import main

if __name__ == "__main__":
    # Restore the default SIGPIPE-free exit when output is piped into `head`.
    try:
        sys.exit(main())
    except BrokenPipeError:
        os._exit(1)
