"""The `teammate` command's arguments: one small function per command, each naming its handler
(`run`, called by `bots.cli.main` with the parsed arguments), and the options several commands
share (`--model`, `--data-dir`, `--workspace`, `-v` before or after the command; `--http`,
`--host`, `--port`, `--grace`; `--conversation`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TypeAlias

from bots.cli.chat import ask_command, chat_command
from bots.cli.console import console_command, link_command
from bots.cli.doctor import doctor_command, mcp_list_command
from bots.cli.platforms import (
    invite_command,
    manifest_command,
    platform_command,
    serve_command,
)
from bots.platform import DEFAULT_HTTP_PORT
from bots.platforms.terminal.surface import DEFAULT_CONVERSATION
from bots.serve import SHUTDOWN_GRACE_S

# What `add_subparsers` returns, each command's parser added to it.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


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
    for add in (_chat, _ask, _serve, _slack, _discord, _console, _mcp, _doctor):
        add(commands)
    return parser


def _chat(commands: Commands) -> None:
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
    chat.set_defaults(run=chat_command)


def _ask(commands: Commands) -> None:
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
    ask.set_defaults(run=ask_command)


def _serve(commands: Commands) -> None:
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
    serve.set_defaults(run=serve_command)


def _slack(commands: Commands) -> None:
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
    slack.set_defaults(run=platform_command)
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
    manifest.add_argument(
        "--console-url",
        metavar="URL",
        help="the console's address, for Sign in with Slack (default: [console] public_url)",
    )
    manifest.add_argument("--name", default="Teammate", help="the app's name (default Teammate)")
    manifest.set_defaults(run=manifest_command)


def _discord(commands: Commands) -> None:
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
    discord.set_defaults(run=platform_command)
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
    invite.set_defaults(run=invite_command)


def _console(commands: Commands) -> None:
    console = commands.add_parser(
        "console",
        help="the web console alone, over an existing database; `console link` signs one in",
        description=(
            "Serve the web console on [console] host and port (127.0.0.1:8750) over the "
            "database `teammate serve` uses, without any chat platform. `teammate serve` "
            "serves it too. `console link --user slack:U0123` prints a one-time sign-in URL."
        ),
    )
    _global_options(console, default=argparse.SUPPRESS)
    console.set_defaults(run=console_command)
    sub = console.add_subparsers(dest="console_command", metavar="link")
    link = sub.add_parser(
        "link",
        help="print a sign-in URL for one person (once, within 10 minutes; audited)",
        description="Print on stdout a URL that signs PERSON in to the console once, within "
        "ten minutes. PERSON must be an admin or a [console] viewer.",
    )
    link.add_argument("--user", required=True, metavar="PERSON", help="slack:U0123 or discord:1234")
    _global_options(link, default=argparse.SUPPRESS)
    link.set_defaults(run=link_command)


def _mcp(commands: Commands) -> None:
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
    mcp_list.set_defaults(run=mcp_list_command)


def _doctor(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check configuration, storage, model access and tools",
        description="Check what is configured and whether it works; one line per check.",
    )
    _global_options(doctor, default=argparse.SUPPRESS)
    doctor.set_defaults(run=doctor_command)


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
