"""The `teammate` command: `chat`, `ask`, `serve`, `slack` (and `slack manifest`), `discord`
(and `discord invite`), `console` (and `console link`), `mcp list`, `doctor`.

Owns: `main`, the entry point (`teammate`, `python -m bots.cli`): parse, run the command's
handler, exit statuses, and turning expected failures (a missing key, an invalid setting) into
one line on stderr. Unexpected failures are logged with their traceback under a reference id;
people see the id.

Exit statuses: 0 success; 1 the run or a check failed; 2 usage or configuration error;
130 interrupted.

The package, one owner each: `parser` (the arguments; each command names its handler),
`common` (settings loaded once, command-line overrides first; the log; the failure line),
`chat` (`ask`, `chat`), `platforms` (`serve`, `slack`, `discord` and their `manifest` and
`invite`), `console` (`console`, `console link`), `doctor` (`doctor`, `mcp list`).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from bots.cli.common import fail
from bots.cli.parser import build_parser
from bots.errors import new_reference
from bots.settings import SettingsError

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.run(args)
        return status
    except SettingsError as exc:
        fail(str(exc))
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 130
    except Exception:
        reference = new_reference()
        log.exception("teammate %s failed (reference %s)", args.command, reference)
        fail(f"something went wrong (reference {reference}; details in the log)")
        return 1
