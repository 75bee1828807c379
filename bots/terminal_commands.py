"""`teammate ask` and `teammate chat`: a terminal conversation on the app.

Owns: where a terminal conversation's tools work (`workspace_of`: `--workspace DIR`, else the
directory the command was started in, confined to it as a channel is to its workspace) and
opening the app for one. Must not: parse arguments beyond `--workspace`, or print anything but
through the terminal surface.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bots.app import App, open_app
from bots.settings import Settings, SettingsError
from bots.terminal import (
    TERMINAL_RULES,
    StdinLines,
    TerminalSurfaces,
    conversation_key,
    run_ask,
    run_chat,
)


def workspace_of(args: argparse.Namespace) -> Path:
    """Where a terminal conversation's tools work: `--workspace DIR`, else the directory the
    command was started in (confined to it as a channel is to its workspace)."""
    path = (getattr(args, "workspace", None) or Path.cwd()).resolve()
    if not path.is_dir():
        raise SettingsError(f"--workspace {path} is not a directory")
    return path


@asynccontextmanager
async def _terminal(settings: Settings, key: str, workspace: Path) -> AsyncIterator[App]:
    surfaces = TerminalSurfaces(err=sys.stderr, current_key=key)
    async with open_app(settings, platform_rules=TERMINAL_RULES, surfaces=surfaces) as app:
        app.runner.use_workspace(key, workspace)
        yield app


async def ask_command(settings: Settings, name: str, prompt: str, workspace: Path) -> int:
    async with _terminal(settings, conversation_key(name), workspace) as app:
        return await run_ask(app, name, prompt, out=sys.stdout, err=sys.stderr)


async def chat_command(settings: Settings, name: str, workspace: Path) -> int:
    key = conversation_key(name)
    async with _terminal(settings, key, workspace) as app:
        return await run_chat(
            app,
            name,
            lines=StdinLines(sys.stdin.fileno()),
            out=sys.stdout,
            err=sys.stderr,
            interactive=sys.stdin.isatty(),
            model_id=settings.model_for(key),
        )
