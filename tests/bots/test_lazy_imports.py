"""What every `teammate` command pays at start: heavy SDKs load only where they are used.

Importing the MCP SDK costs about a second of CPU and discord.py about as much; every
`teammate` command (and every CLI test) paid both. They are now imported where they are used:
the MCP SDK when a server is configured (or `mcp list` / `doctor` reports on them), discord.py
when Discord runs or its invite or checks are asked for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("mcp", "mcp_types", "discord")


def test_the_cli_and_an_app_without_mcp_servers_load_neither_sdk(tmp_path: Path) -> None:
    probe = (
        "import asyncio, sys\n"
        "from bots.cli import main\n"
        "from bots.app import mcp_hub\n"
        "from bots.settings import Settings\n"
        f"assert mcp_hub(Settings(data_dir={str(tmp_path)!r})) is None\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
