"""`teammate serve` and `teammate slack`: the chat platforms in one process, one runner, one store.

Owns: deciding which platforms are configured (Slack: `SLACK_BOT_TOKEN` with
`SLACK_APP_TOKEN` for Socket Mode or `SLACK_SIGNING_SECRET` for HTTP mode; Discord:
`DISCORD_BOT_TOKEN`), explaining in a
few lines what to set when none is, starting each platform on the shared runner, crash
recovery once every platform has started, and a graceful stop on SIGTERM or Ctrl-C: stop
taking events, let running answers finish for a grace period, then stop the rest (their
messages stay in the store's inbox and are answered after the next start) and close the store.
A second Ctrl-C stops at once.

Must not: know a platform's payloads (its adapter does) or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from bots.app import open_app, require_model_credentials
from bots.discord_platform import (
    DiscordCheckError,
    DiscordPlatform,
    intent_mode,
)
from bots.settings import Settings, SettingsError
from bots.surface import Surface

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
DEFAULT_HTTP_PORT = 3000
SlackMode = Literal["socket", "http"]


@dataclass(slots=True, frozen=True)
class Plan:
    """What to start: Slack in one mode (None: not configured), and Discord or not."""

    slack: SlackMode | None
    discord: bool = False
    host: str = "0.0.0.0"
    port: int = DEFAULT_HTTP_PORT


def _set(settings: Settings, name: str) -> bool:
    value = getattr(settings, name)
    return value is not None and bool(value.get_secret_value())


def slack_mode(settings: Settings, *, http: bool | None = None) -> SlackMode | None:
    """Slack's mode from the credentials (`http` forces one); None when not configured."""
    if not _set(settings, "slack_bot_token"):
        return None
    if http is None:
        if _set(settings, "slack_app_token"):
            return "socket"
        return "http" if _set(settings, "slack_signing_secret") else None
    return "http" if http else "socket"


def nothing_configured_text() -> str:
    return "\n".join(
        [
            "teammate: no chat platform is configured, so there is nothing to serve.",
            "  Slack:   set SLACK_BOT_TOKEN (xoxb-…) and SLACK_APP_TOKEN (xapp-…, Socket Mode),",
            "           or SLACK_SIGNING_SECRET instead of SLACK_APP_TOKEN for HTTP mode;",
            "           `teammate slack manifest` prints the app to create (see README.md).",
            "  Discord: set DISCORD_BOT_TOKEN (Developer Portal → Bot); `teammate discord invite`",
            "           prints the link that adds the bot to a server (see README.md).",
            "  To talk to Teammate in this terminal instead: teammate chat",
        ]
    )


def require_slack(settings: Settings, mode: SlackMode) -> None:
    """A `SettingsError` naming every missing Slack credential for `mode`."""
    needed = ["slack_bot_token", "slack_app_token" if mode == "socket" else "slack_signing_secret"]
    missing = [name.upper() for name in needed if not _set(settings, name)]
    if missing:
        how = "Socket Mode" if mode == "socket" else "HTTP mode (--http)"
        verb = "is" if len(missing) == 1 else "are"
        raise SettingsError(
            f"{' and '.join(missing)} {verb} not set (needed for Slack in {how}; "
            "`teammate slack manifest` prints the app to create)"
        )


class PlatformSurfaces:
    """The runner's `SurfaceFactory` for several platforms: by the key's platform prefix."""

    def __init__(self) -> None:
        self._by_platform: dict[str, Any] = {}

    def add(self, platform: str, factory: Any) -> None:
        self._by_platform[platform] = factory

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        factory = self._by_platform.get(conversation_key.split(":", 1)[0])
        return None if factory is None else factory.for_ref(conversation_key, ref)


async def serve(
    settings: Settings,
    plan: Plan,
    *,
    err: TextIO,
    stop: asyncio.Event | None = None,
    grace_s: float = SHUTDOWN_GRACE_S,
    ready: Callable[[str], None] | None = None,
) -> int:
    """Run the planned platforms until SIGTERM/SIGINT (or `stop`); the exit status."""
    if plan.slack is None and not plan.discord:
        raise SettingsError("no platform to start")
    if plan.slack is not None:
        require_slack(settings, plan.slack)
        require_model_credentials(settings, "slack")
    if plan.discord:
        require_model_credentials(settings, "discord")
    from bots.discord.bot import DISCORD_RULES
    from bots.slack.app import SLACK_RULES, SlackBot, SlackStartError
    from bots.slack.commands import register_commands

    stop = stop or asyncio.Event()
    restore = _install_signal_handlers(stop, err)
    bot = SlackBot(settings) if plan.slack is not None else None
    discord = DiscordPlatform(settings) if plan.discord else None
    surfaces = PlatformSurfaces()
    # One runner for every platform; each channel's prompt carries its own platform's rules.
    platform_rules: dict[str, str] = {}
    if bot is not None:
        surfaces.add("slack", bot.surfaces)
        platform_rules["slack"] = SLACK_RULES
    if discord is not None:
        surfaces.add("discord", discord.surfaces)
        platform_rules["discord"] = DISCORD_RULES

    async def shutdown(grace: float) -> None:
        await asyncio.gather(
            *([bot.shutdown(grace_s=grace)] if bot is not None else []),
            *([discord.shutdown(grace_s=grace)] if discord is not None else []),
        )

    try:
        async with open_app(settings, platform_rules=platform_rules, surfaces=surfaces) as app:
            lines: list[str] = []
            where = ""
            try:
                identity = None
                if bot is not None:
                    register_commands(
                        bot.bolt, runner=app.runner, settings=settings, spawn=bot.spawn
                    )
                    identity = await bot.start(app.runner)
                if discord is not None:
                    me = await discord.start(app.runner)
                    lines.append(f"Discord: connected as @{me.name}, {intent_mode(settings)}.")
                # Recovery once every platform has started: interrupted runs are reported
                # where they were shown, on whichever platform that was.
                await app.runner.recover()
                # Scheduled work, posted to whichever platforms run here (bots.scheduler).
                if app.scheduler is not None:
                    if bot is not None:
                        app.scheduler.add_platform("slack", bot.surfaces)
                    if discord is not None:
                        app.scheduler.add_platform("discord", discord)
                    app.scheduler.start()
                if bot is not None and identity is not None:
                    if plan.slack == "socket":
                        await bot.connect_socket_mode()
                        where = "Socket Mode"
                    else:
                        port = await bot.listen_http(plan.host, plan.port)
                        where = f"HTTP mode on {plan.host}:{port}/slack/events"
                    lines.insert(0, f"Slack: connected as @{identity.name} ({where}).")
            except (SlackStartError, DiscordCheckError) as exc:
                err.write(f"teammate: {exc}\n")
                await shutdown(0)
                return 1
            for line in [*lines, "Ctrl-C or SIGTERM stops."]:
                err.write(f"teammate: {line}\n")
                log.info(line)
            err.flush()
            if ready is not None:
                ready(where or "Discord")
            await stop.wait()
            if app.scheduler is not None:
                await app.scheduler.close()  # no new scheduled work while stopping
            err.write(
                f"teammate: stopping: no new events; answers in progress get {grace_s:g} s "
                "to finish…\n"
            )
            err.flush()
            await shutdown(grace_s)
        # open_app's exit stopped what was still running (its messages stay queued in the
        # store for the next start) and closed the store.
        err.write("teammate: stopped.\n")
        return 0
    finally:
        restore()


def _install_signal_handlers(stop: asyncio.Event, err: TextIO) -> Callable[[], None]:
    """First SIGTERM/SIGINT: a graceful stop; a second one: stop now (cancel the main task)."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    installed: list[signal.Signals] = []

    def on_signal() -> None:
        if stop.is_set():
            err.write("teammate: stopping now.\n")
            if main is not None:
                main.cancel()
            return
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore
