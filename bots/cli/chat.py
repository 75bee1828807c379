"""`teammate ask` and `teammate chat`: a terminal conversation on the app.

Owns: the two commands' handlers (the conversation's name, the prompt, `-` for stdin), where a
terminal conversation's tools work (`workspace_of`: `--workspace DIR`, else the directory the
command was started in, confined to it as a channel is to its workspace) and opening the app
for one. Must not: print anything but through the terminal surface.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bots.app import App, open_app, require_model_credentials
from bots.cli.common import settings_from, start_logging
from bots.platforms.terminal.approvals import TerminalApprovals
from bots.platforms.terminal.surface import (
    TERMINAL_RULES,
    StdinLines,
    TerminalSurfaces,
    conversation_key,
    local_author,
    run_ask,
    run_chat,
)
from bots.settings import Settings, SettingsError


def ask_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    prompt = _prompt(args.prompt)
    name = _conversation_name(args.conversation)
    require_model_credentials(settings, conversation_key(name))
    start_logging(settings, args)
    return asyncio.run(_ask(settings, name, prompt, workspace_of(args)))


def chat_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    name = _conversation_name(args.conversation)
    require_model_credentials(settings, conversation_key(name))
    start_logging(settings, args)
    return asyncio.run(_chat(settings, name, workspace_of(args)))


def _conversation_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise SettingsError("--conversation: the name must not be empty")
    return name


def _prompt(words: list[str]) -> str:
    prompt = sys.stdin.read() if words == ["-"] else " ".join(words)
    if not prompt.strip():
        raise SettingsError("the prompt is empty")
    return prompt.strip()


def workspace_of(args: argparse.Namespace) -> Path:
    """Where a terminal conversation's tools work: `--workspace DIR`, else the directory the
    command was started in (confined to it as a channel is to its workspace)."""
    path = (getattr(args, "workspace", None) or Path.cwd()).resolve()
    if not path.is_dir():
        raise SettingsError(f"--workspace {path} is not a directory")
    return path


@asynccontextmanager
async def _terminal(
    settings: Settings, key: str, workspace: Path
) -> AsyncIterator[tuple[App, TerminalSurfaces]]:
    surfaces = TerminalSurfaces(err=sys.stderr, current_key=key)
    async with open_app(settings, platform_rules=TERMINAL_RULES, surfaces=surfaces) as app:
        app.runner.use_workspace(key, workspace)
        yield app, surfaces


async def _ask(settings: Settings, name: str, prompt: str, workspace: Path) -> int:
    async with _terminal(settings, conversation_key(name), workspace) as (app, _surfaces):
        # An approval's question needs a terminal to answer it; without one it is denied.
        read_line = _read_terminal_line if sys.stdin.isatty() else None
        return await run_ask(app, name, prompt, out=sys.stdout, err=sys.stderr, read_line=read_line)


async def _read_terminal_line() -> str | None:
    line = await asyncio.to_thread(sys.stdin.readline)
    return line or None


async def _chat(settings: Settings, name: str, workspace: Path) -> int:
    key = conversation_key(name)
    async with _terminal(settings, key, workspace) as (app, surfaces):
        # Approval questions are asked on stderr, answered by the next line typed (a run
        # continued after a restart asks here too); piped input cannot answer: denied.
        approvals = TerminalApprovals(app.runner.approvals, key, local_author(), sys.stderr)
        approvals.interactive = sys.stdin.isatty()
        surfaces.approvals = approvals
        return await run_chat(
            app,
            name,
            lines=StdinLines(sys.stdin.fileno()),
            out=sys.stdout,
            err=sys.stderr,
            interactive=sys.stdin.isatty(),
            model_id=settings.model_for(key),
            approvals=approvals,
        )
