"""`teammate serve` (every configured platform, and the process's one HTTP server: the console),
`teammate slack` and `teammate discord` (one platform alone, by its registered name), and what
a platform needs set up first: `slack manifest` and `discord invite`.

Owns: choosing the platforms and `ServeOptions` from the command line, the `--grace` check,
and the nothing-configured exit (2). Must not: know what a platform needs to be configured
(its `Platform` in `bots.serve.PLATFORMS` says) or run it (`bots.serve.serve` does).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from bots.cli.common import fail, settings_from, start_logging
from bots.platform import Platform, ServeOptions
from bots.platforms.discord.platform import DiscordCheckError, application_id, invite_url
from bots.platforms.slack.manifest import manifest_json
from bots.serve import PLATFORMS, configured_platforms, nothing_configured_text, serve
from bots.settings import Settings, SettingsError


def serve_command(args: argparse.Namespace) -> int:
    """Every configured platform; none configured: what to set for each, and exit 2."""
    settings = settings_from(args)
    options = ServeOptions(http=True if args.http else None, host=args.host, port=args.port)
    if not configured_platforms(settings, options, PLATFORMS):
        sys.stderr.write(nothing_configured_text(PLATFORMS) + "\n")
        return 2
    return _serve(args, settings, options, PLATFORMS, console=True)


def platform_command(args: argparse.Namespace) -> int:
    """A platform's own command (`teammate slack`): what it needs is named even when nothing
    of it is set."""
    settings = settings_from(args)
    platform = platform_named(args.command)
    if "http" in args:
        # A command with --http (Slack's): that mode or Socket Mode, not guessed from the
        # credentials as `serve` does.
        options = ServeOptions(http=bool(args.http), host=args.host, port=args.port)
    else:
        options = ServeOptions()
    platform.require(settings, options)
    return _serve(args, settings, options, (platform,))


def platform_named(name: str) -> type[Platform]:
    return next(platform for platform in PLATFORMS if platform.name == name)


def _serve(
    args: argparse.Namespace,
    settings: Settings,
    options: ServeOptions,
    platforms: Sequence[type[Platform]],
    *,
    console: bool = False,
) -> int:
    start_logging(settings, args)
    if args.grace < 0:
        raise SettingsError("--grace: must be 0 or more seconds")
    return asyncio.run(
        serve(
            settings,
            options,
            err=sys.stderr,
            platforms=platforms,
            grace_s=args.grace,
            console=console,
        )
    )


def manifest_command(args: argparse.Namespace) -> int:
    """`teammate slack manifest`: the app to paste at api.slack.com."""
    # The configured slash command and console address, if the settings load.
    try:
        settings = settings_from(args)
        command, console = settings.slack.command, settings.console.public_url
    except SettingsError:
        command, console = "/teammate", ""
    sys.stdout.write(
        manifest_json(
            command=command,
            name=args.name,
            request_url=args.request_url,
            console_url=args.console_url or console or None,
        )
    )
    return 0


def invite_command(args: argparse.Namespace) -> int:
    """`teammate discord invite`: the link that adds the bot to a server."""
    settings = settings_from(args)
    return asyncio.run(_print_invite(settings, args.application_id))


async def _print_invite(settings: Settings, given: str | None) -> int:
    if given is not None and not given.isdigit():
        raise SettingsError("--application-id: a number (Developer Portal → General Information)")
    try:
        found = given or await application_id(settings)
    except DiscordCheckError as exc:
        fail(str(exc))
        return 1
    sys.stdout.write(invite_url(found) + "\n")
    if settings.discord_client_id:  # the console's Sign in with Discord
        base = settings.console.public_url.rstrip("/") or "http://127.0.0.1:8750"
        sys.stderr.write(
            "teammate: for the console's sign-in, add this redirect under OAuth2 → Redirects: "
            f"{base}/auth/discord/callback\n"
        )
    return 0
