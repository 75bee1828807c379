"""The `teammate` command: `chat`, `ask`, `serve`, `slack` (and `slack manifest`), `discord`
(and `discord invite`), `mcp list`, `doctor`.

Owns: the argument parser, loading settings once (command-line overrides first), exit statuses,
and turning expected failures (a missing key, an invalid setting) into one line on stderr.
Unexpected failures are logged with their traceback under a reference id; people see the id.

Exit statuses: 0 success; 1 the run or a check failed; 2 usage or configuration error;
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from bots.app import (
    require_model_credentials,
    setup_logging,
)
from bots.discord_platform import DiscordCheckError, DiscordPlatform, application_id, invite_url
from bots.errors import new_reference
from bots.mcp_report import check_mcp, print_mcp_list
from bots.model_report import check_models
from bots.platform import DEFAULT_HTTP_PORT, Platform, ServeOptions, Status
from bots.sandbox_report import report_sandbox
from bots.serve import (
    PLATFORMS,
    SHUTDOWN_GRACE_S,
    configured_platforms,
    nothing_configured_text,
    serve,
)
from bots.settings import Settings, SettingsError, config_path, load_settings
from bots.slack.manifest import manifest_json
from bots.slack_platform import SlackPlatform
from bots.terminal import (
    DEFAULT_CONVERSATION,
    conversation_key,
)
from bots.terminal_commands import ask_command, chat_command, workspace_of
from storage.base import DatabaseDamaged
from storage.postgres import PostgresStore, is_postgres_url, redact_url
from storage.sqlite import SqliteStore
from storage.sqlite_migrations import MIGRATIONS
from tools.bash import probe_sandbox

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teammate",
        description=(
            "Teammate: a team's shared AI assistant for Slack, Discord and the terminal. "
            "Configuration comes from the environment (ANTHROPIC_API_KEY, TEAMMATE_MODEL, "
            "TEAMMATE_DATA_DIR, ...), an optional .env and an optional teammate.toml "
            "(path in TEAMMATE_CONFIG)."
        ),
        epilog=(
            "examples:\n"
            "  teammate chat                      talk in the terminal\n"
            "  teammate ask 'what is in README.md?'\n"
            "  git diff | teammate ask -          the prompt from stdin\n"
            "  teammate --model scripted ask hi   a demo without an API key\n"
            "  teammate serve                     every configured chat platform\n"
            "  teammate slack manifest            the Slack app to create, ready to paste\n"
            "  teammate discord invite            the link that adds the Discord bot\n"
            "  teammate doctor                    check the configuration"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, default=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = commands.add_parser(
        "chat",
        help="an interactive conversation in the terminal",
        description=(
            "Talk with Teammate. The answer streams to stdout; tool activity appears on stderr. "
            "Ctrl-C stops a running answer; /stop, /reset, /usage, /help and /exit work."
        ),
    )
    _global_options(chat, default=argparse.SUPPRESS)
    _conversation_option(chat)

    ask = commands.add_parser(
        "ask",
        help="ask one question; the answer is printed on stdout",
        description=(
            "Send one message and print the final answer on stdout (tool activity on stderr). "
            "Exit status 0 on success, non-zero with a one-line reason on failure. Calls with "
            "the same --conversation continue the same conversation."
        ),
    )
    _global_options(ask, default=argparse.SUPPRESS)
    _conversation_option(ask)
    ask.add_argument("prompt", metavar="PROMPT", nargs="+", help="the message ('-': read stdin)")

    serve = commands.add_parser(
        "serve",
        help="run every chat platform whose credentials are set (Slack, Discord), in one process",
        description=(
            "Start every configured platform on one runner and store: Slack with SLACK_BOT_TOKEN "
            "and SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode), Discord with "
            "DISCORD_BOT_TOKEN. SIGTERM or Ctrl-C stops gracefully: no new events, answers in "
            "progress finish (up to --grace seconds) or are stopped; a second Ctrl-C: at once."
        ),
    )
    _global_options(serve, default=argparse.SUPPRESS)
    _http_options(serve)

    slack = commands.add_parser(
        "slack",
        help="run Teammate in Slack (Socket Mode; --http for the Events API)",
        description=(
            "Connect to Slack with Socket Mode (SLACK_BOT_TOKEN, SLACK_APP_TOKEN; no public URL "
            "needed), or with --http serve the Events API, interactivity and the slash command "
            "at /slack/events (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET). `teammate slack "
            "manifest` prints the app manifest to paste at https://api.slack.com/apps."
        ),
    )
    _global_options(slack, default=argparse.SUPPRESS)
    _http_options(slack)
    slack_commands = slack.add_subparsers(dest="slack_command", metavar="manifest")
    manifest = slack_commands.add_parser(
        "manifest",
        help="print the Slack app manifest (JSON; paste it when creating the app)",
        description=(
            "Print the Slack app manifest with exactly the scopes, events, slash command and "
            "interactivity Teammate uses. Socket Mode is on, unless --request-url is given "
            "(HTTP mode: your public https://…/slack/events)."
        ),
    )
    manifest.add_argument("--request-url", metavar="URL", help="HTTP mode's public URL")
    manifest.add_argument("--name", default="Teammate", help="the app's name (default Teammate)")

    discord = commands.add_parser(
        "discord",
        help="run Teammate in Discord (DISCORD_BOT_TOKEN)",
        description=(
            "Connect to Discord's gateway with DISCORD_BOT_TOKEN (DISCORD_API_URL and "
            "DISCORD_GATEWAY_URL: a Discord-compatible server). `teammate discord invite` "
            "prints the link that adds the bot to a server with the permissions it needs."
        ),
    )
    _global_options(discord, default=argparse.SUPPRESS)
    _grace_option(discord)
    discord_commands = discord.add_subparsers(dest="discord_command", metavar="invite")
    invite = discord_commands.add_parser(
        "invite",
        help="print the invite URL (bot and applications.commands, the permissions needed)",
        description=(
            "Print the URL that adds the bot to a server: the bot and applications.commands "
            "scopes and exactly the permissions Teammate needs. The application id comes from "
            "--application-id, else from DISCORD_BOT_TOKEN (GET /oauth2/applications/@me)."
        ),
    )
    invite.add_argument("--application-id", metavar="ID", help="the application's id")

    mcp = commands.add_parser(
        "mcp",
        help="MCP tool servers: `mcp list` starts each and shows its tools",
        description="MCP tool servers configured in [mcp.servers.NAME].",
    )
    mcp_commands = mcp.add_subparsers(dest="mcp_command", metavar="list", required=True)
    mcp_list = mcp_commands.add_parser(
        "list", help="start each server once; show whether it starts and its tools"
    )
    _global_options(mcp_list, default=argparse.SUPPRESS)

    doctor = commands.add_parser(
        "doctor",
        help="check configuration, storage, model access and tools",
        description="Check what is configured and whether it works; one line per check.",
    )
    _global_options(doctor, default=argparse.SUPPRESS)
    return parser


def _global_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    """Options accepted before or after the command (`teammate --model x ask` and
    `teammate ask --model x`); subcommands don't reset what was given before them."""
    parser.add_argument(
        "--model",
        metavar="MODEL",
        default=default,
        help="model id (overrides TEAMMATE_MODEL), e.g. claude-sonnet-5-5, or 'scripted' "
        "for a demo model that needs no API key",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        type=Path,
        default=default,
        help="where the database, workspaces and log live (overrides TEAMMATE_DATA_DIR)",
    )
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        type=Path,
        default=default,
        help="chat and ask: the directory the tools work in (the current one by default)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if default is None else default,
        help="also show the log on stderr",
    )


def _http_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--http",
        action="store_true",
        default=None,
        help="Slack in HTTP mode (signed requests at /slack/events) instead of Socket Mode",
    )
    parser.add_argument(
        "--host", default="0.0.0.0", help="HTTP mode: the address to listen on (0.0.0.0)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_HTTP_PORT,
        help=f"HTTP mode: the port ({DEFAULT_HTTP_PORT}; 0 picks a free one)",
    )
    _grace_option(parser)


def _grace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grace",
        type=float,
        default=SHUTDOWN_GRACE_S,
        metavar="SECONDS",
        help=f"on SIGTERM/Ctrl-C, how long answers in progress may take to finish before "
        f"they are stopped ({SHUTDOWN_GRACE_S:.0f})",
    )


def _conversation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        "--conversation",
        metavar="NAME",
        default=DEFAULT_CONVERSATION,
        help=f"which terminal conversation to continue (default: {DEFAULT_CONVERSATION})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.command == "doctor":
            return asyncio.run(doctor(args, sys.stdout))
        if args.command == "slack" and args.slack_command == "manifest":
            return _print_manifest(args)
        settings = _load(args)
        if args.command == "discord" and args.discord_command == "invite":
            return asyncio.run(_print_invite(settings, args.application_id))
        if args.command in ("serve", "slack", "discord"):
            return _serve(args, settings)
        if args.command == "mcp":
            setup_logging(settings, stderr=sys.stderr if args.verbose else None)
            return asyncio.run(print_mcp_list(settings, sys.stdout))
        if args.command == "ask":
            prompt = _prompt(args.prompt)
            name = _conversation_name(args.conversation)
            require_model_credentials(settings, conversation_key(name))
            setup_logging(settings, stderr=sys.stderr if args.verbose else None)
            return asyncio.run(ask_command(settings, name, prompt, workspace_of(args)))
        name = _conversation_name(args.conversation)
        require_model_credentials(settings, conversation_key(name))
        setup_logging(settings, stderr=sys.stderr if args.verbose else None)
        return asyncio.run(chat_command(settings, name, workspace_of(args)))
    except SettingsError as exc:
        _fail(str(exc))
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 130
    except Exception:
        reference = new_reference()
        log.exception("teammate %s failed (reference %s)", args.command, reference)
        _fail(f"something went wrong (reference {reference}; details in the log)")
        return 1


def _print_manifest(args: argparse.Namespace) -> int:
    # The configured slash command, if the settings load; the default otherwise.
    try:
        command = _load(args).slack.command
    except SettingsError:
        command = "/teammate"
    sys.stdout.write(manifest_json(command=command, name=args.name, request_url=args.request_url))
    return 0


async def _print_invite(settings: Settings, given: str | None) -> int:
    if given is not None and not given.isdigit():
        raise SettingsError("--application-id: a number (Developer Portal → General Information)")
    try:
        found = given or await application_id(settings)
    except DiscordCheckError as exc:
        _fail(str(exc))
        return 1
    sys.stdout.write(invite_url(found) + "\n")
    return 0


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    platforms: tuple[type[Platform], ...]
    if args.command in ("slack", "discord"):
        # A platform's own command: what it needs, named even when nothing of it is set.
        platforms = (SlackPlatform,) if args.command == "slack" else (DiscordPlatform,)
        options = ServeOptions(http=bool(args.http)) if args.command == "slack" else ServeOptions()
        platforms[0].require(settings, options)
    else:
        options = ServeOptions(http=True if args.http else None)
        platforms = PLATFORMS
        if not configured_platforms(settings, options, platforms):
            sys.stderr.write(nothing_configured_text(platforms) + "\n")
            return 2
    if hasattr(args, "host"):  # --http's address
        options = dataclasses.replace(options, host=args.host, port=args.port)
    setup_logging(settings, stderr=sys.stderr if args.verbose else None)
    if args.grace < 0:
        raise SettingsError("--grace: must be 0 or more seconds")
    return asyncio.run(
        serve(settings, options, err=sys.stderr, platforms=platforms, grace_s=args.grace)
    )


def _fail(reason: str) -> None:
    sys.stderr.write(f"teammate: {reason}\n")
    sys.stderr.flush()


def _load(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    return load_settings(**overrides)


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


# -- doctor --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Check:
    status: Status
    name: str
    detail: str


async def doctor(args: argparse.Namespace, out: TextIO) -> int:
    """One line per check; exit 1 if any check fails."""
    checks: list[Check] = []

    def report(status: Status, name: str, detail: str) -> None:
        check = Check(status, name, detail)
        checks.append(check)
        out.write(f"{check.status:<5} {check.name}: {check.detail}\n")
        out.flush()

    try:
        settings = _load(args)
    except SettingsError as exc:
        report("fail", "settings", str(exc))
        return 1
    toml = config_path()
    report(
        "ok",
        "settings",
        f"loaded (TOML file: {toml})" if toml else "loaded (no TOML file; environment only)",
    )
    setup_logging(settings, stderr=sys.stderr if args.verbose else None)

    data_ok = await asyncio.to_thread(_writable, settings.data_dir)
    if data_ok is None:
        report("ok", "data dir", f"{settings.data_dir.resolve()} is writable")
    else:
        report("fail", "data dir", f"{settings.data_dir}: {data_ok}")

    if settings.database_url is not None:
        await _check_postgres(settings.database_url.get_secret_value(), report)
    elif data_ok is None:
        await _check_database(settings.database_path, report)
    else:
        report("fail", "database", "not checked (the data dir is not writable)")

    # Stored channel models are read where the database could be checked.
    reachable = data_ok is None or settings.database_url is not None
    await check_models(settings, report, read_store=reachable)

    report_sandbox(settings, await asyncio.to_thread(probe_sandbox), report)

    rg = shutil.which("rg")
    if rg:
        report("ok", "ripgrep", rg)
    elif settings.tools.grep_engine == "ripgrep":
        report("fail", "ripgrep", "not found, but tools.grep_engine is 'ripgrep'")
    else:
        report("warn", "ripgrep", "not found; grep uses its slower Python engine")

    for platform in PLATFORMS:
        await platform.doctor(settings, report)
    await check_mcp(settings, report)

    failed = [check for check in checks if check.status == "fail"]
    out.write(f"{len(failed)} check(s) failed\n" if failed else "all checks passed\n")
    return 1 if failed else 0


async def _check_database(path: Path, report: Any) -> None:
    """Open the store (which runs SQLite's quick check), then the full integrity check; a file
    the store refuses as damaged is still checked in full, read-only, to say what is wrong."""
    problems: list[str]
    try:
        async with SqliteStore.open(path) as store:
            report("ok", "database", f"{path} opens (schema version {len(MIGRATIONS)})")
            problems = await store.integrity_check()
    except DatabaseDamaged as exc:
        report("fail", "database", str(exc))
        problems = await SqliteStore.check_file(path)
    except Exception as exc:
        report("fail", "database", f"{path}: {exc}")
        return
    if not problems:
        report("ok", "database integrity", "no damage found (full check)")
        return
    first = " ".join(problems[0].split())[:200]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    report("fail", "database integrity", f"{len(problems)} problem(s): {first}{more}")


async def _check_postgres(url: str, report: Any) -> None:
    """Reach the PostgreSQL database (opening checks and migrates its schema) and say which
    server and schema version it is; the URL is shown without its password."""
    shown = redact_url(url)
    if not is_postgres_url(url):
        report("fail", "database", f"TEAMMATE_DATABASE_URL: {shown} is not a postgresql:// URL")
        return
    try:
        async with asyncio.timeout(15), PostgresStore.open(url) as store:
            about = await store.describe()
    except Exception as exc:
        password = urlsplit(url).password
        detail = str(exc).replace(password, "***") if password else str(exc)
        report("fail", "database", f"PostgreSQL at {shown} is not reachable or usable: {detail}")
        return
    report(
        "ok",
        "database",
        f"PostgreSQL {about['server_version']} at {shown} is reachable (schema "
        f"{about['schema']!r}, schema version {about['version']})",
    )


def _writable(directory: Path) -> str | None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _configured(settings: Settings, names: list[str]) -> str:
    present = [name.upper() for name in names if getattr(settings, name) is not None]
    if not present:
        return "not configured"
    return f"configured ({', '.join(present)} set)"


if __name__ == "__main__":
    # Restore the default SIGPIPE-free exit when output is piped into `head`.
    try:
        sys.exit(main())
    except BrokenPipeError:
        os._exit(1)
