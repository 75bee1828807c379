"""Slack as one platform of `teammate serve` / `teammate slack`, and its set-up checks.

Owns: what Slack needs to run (`SLACK_BOT_TOKEN`, with `SLACK_APP_TOKEN` for Socket Mode or
`SLACK_SIGNING_SECRET` for HTTP mode; which mode the credentials choose), the token checks
`teammate doctor` makes (`auth.test` with the scopes granted, `apps.connections.open`: only
Slack's error names, never a token), and `SlackPlatform` (a `bots.platform.Platform`):
`SlackBot` and its slash command on the shared runner, connected after recovery in Socket Mode
or HTTP mode, and stopped gracefully.

Must not: know Slack's payloads (bots.platforms.slack does) or import bots.platforms.discord.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from bots.features.scheduler import StartedThread
from bots.platform import PlatformStartError, Report, ServeOptions
from bots.runner import ConversationRunner
from bots.settings import Settings, SettingsError

if TYPE_CHECKING:
    from bots.platforms.slack.app import AppSurfaces, SlackBot

SlackMode = Literal["socket", "http"]
PROBE_TIMEOUT_S = 20.0


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


def require_slack(settings: Settings, mode: SlackMode) -> None:
    """A `SettingsError` naming every missing Slack credential for `mode`."""
    needed = ["slack_bot_token", "slack_app_token" if mode == "socket" else "slack_signing_secret"]
    missing = [name.upper() for name in needed if not _set(settings, name)]
    if missing:
        how = "Socket Mode" if mode == "socket" else "HTTP mode (--http)"
        verb = "is" if len(missing) == 1 else "are"
        other = "; or SLACK_SIGNING_SECRET and --http for HTTP mode" if mode == "socket" else ""
        raise SettingsError(
            f"{' and '.join(missing)} {verb} not set (needed for Slack in {how}{other}; "
            "`teammate slack manifest` prints the app to create)"
        )


class SlackPlatform:
    """`SlackBot` on a shared runner: see the module docstring."""

    name: ClassVar[str] = "slack"

    def __init__(self, settings: Settings, options: ServeOptions) -> None:
        from bots.platforms.slack.app import SlackBot

        mode = slack_mode(settings, http=options.http)
        assert mode is not None, "SlackPlatform.require first"
        self.settings = settings
        self.mode: SlackMode = mode
        self.options = options
        self.bot: SlackBot = SlackBot(settings)
        self.surfaces: AppSurfaces = self.bot.surfaces

    @classmethod
    def configured(cls, settings: Settings) -> bool:
        """SLACK_BOT_TOKEN is given (`require` then names what else Slack needs)."""
        return settings.slack_bot_token is not None

    @classmethod
    def require(cls, settings: Settings, options: ServeOptions) -> None:
        mode = slack_mode(settings, http=options.http)
        if mode is None and settings.slack_bot_token is not None:
            raise SettingsError(
                "SLACK_BOT_TOKEN is set, but Slack also needs SLACK_APP_TOKEN (Socket Mode) "
                "or SLACK_SIGNING_SECRET (HTTP mode)"
            )
        require_slack(settings, mode or ("http" if options.http else "socket"))

    @classmethod
    def setup_hint(cls) -> list[str]:
        return [
            "  Slack:   set SLACK_BOT_TOKEN (xoxb-…) and SLACK_APP_TOKEN (xapp-…, Socket Mode),",
            "           or SLACK_SIGNING_SECRET instead of SLACK_APP_TOKEN for HTTP mode;",
            "           `teammate slack manifest` prints the app to create (see README.md).",
        ]

    @classmethod
    async def doctor(cls, settings: Settings, report: Report) -> None:
        await check_slack(settings, report)

    @property
    def rules(self) -> str:
        from bots.platforms.slack.app import SLACK_RULES

        return SLACK_RULES

    async def start(self, runner: ConversationRunner) -> None:
        """The slash command, then `auth.test` and the listeners; no events until `connect`."""
        from bots.platforms.slack.app import SlackStartError
        from bots.platforms.slack.commands import register_commands

        bot = self.bot
        register_commands(bot.bolt, runner=runner, settings=self.settings, spawn=bot.spawn)
        try:
            await bot.start(runner)
        except SlackStartError as exc:
            raise PlatformStartError(str(exc)) from None

    async def connect(self) -> str:
        from bots.platforms.slack.app import SlackStartError

        identity = self.bot.identity
        assert identity is not None, "start first"
        try:
            if self.mode == "socket":
                await self.bot.connect_socket_mode()
                where = "Socket Mode"
            elif self.options.mount is not None:  # on the process's one server (the console's)
                await self.bot.mount_http(self.options.mount)
                where = "HTTP mode at /slack/events on the process's HTTP server"
            else:
                host = self.options.host
                port = await self.bot.listen_http(host, self.options.port)
                where = f"HTTP mode on {host}:{port}/slack/events"
        except SlackStartError as exc:
            raise PlatformStartError(str(exc)) from None
        return f"Slack: connected as @{identity.name} ({where})."

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        return await self.surfaces.start_thread(channel_key, text, for_user=for_user)

    async def stop(self, grace_s: float) -> None:
        await self.bot.shutdown(grace_s=grace_s)


async def check_slack(settings: Settings, report: Report) -> None:
    """The bot token with auth.test (and the scopes it was granted, from the `x-oauth-scopes`
    header), the app token with apps.connections.open. Never prints a token: only Slack's
    error names."""
    from bots.platforms.slack.manifest import missing_scopes

    bot_token = settings.slack_bot_token
    if bot_token is None or not bot_token.get_secret_value():
        report("info", "slack", "not configured (SLACK_BOT_TOKEN is not set)")
        return
    from slack_sdk.web.async_client import AsyncWebClient

    api_url = settings.slack_api_url or "https://slack.com/api/"
    api_url = api_url if api_url.endswith("/") else api_url + "/"
    client = AsyncWebClient(token=bot_token.get_secret_value(), base_url=api_url)
    try:
        try:
            response = await asyncio.wait_for(client.auth_test(), PROBE_TIMEOUT_S)
        except Exception as exc:
            report("fail", "slack", f"auth.test at {api_url} failed: {_slack_error(exc)}")
            return
        who = f"@{response.get('user')} ({response.get('user_id')})"
        team = f"{response.get('team')} ({response.get('team_id')})"
        report("ok", "slack", f"SLACK_BOT_TOKEN works: {who} in {team} via {api_url}")
        headers = {str(k).lower(): str(v) for k, v in (response.headers or {}).items()}
        missing = missing_scopes(headers.get("x-oauth-scopes"))
        if missing:
            report(
                "fail",
                "slack scopes",
                f"missing {', '.join(missing)}: add them under OAuth & Permissions (or "
                "recreate the app from `teammate slack manifest`), then reinstall it",
            )
        else:
            report("ok", "slack scopes", "every scope Teammate uses is granted")
        await _check_slack_app_token(settings, api_url, report)
        secret = settings.slack_signing_secret
        if secret is not None and secret.get_secret_value():
            report("info", "slack signing secret", "set (HTTP mode: teammate slack --http)")
    finally:
        session = getattr(client, "session", None)
        if session is not None and not session.closed:
            await session.close()


async def _check_slack_app_token(settings: Settings, api_url: str, report: Report) -> None:
    app_token = settings.slack_app_token
    if app_token is None or not app_token.get_secret_value():
        report("info", "slack app token", "not set (Socket Mode needs SLACK_APP_TOKEN)")
        return
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(base_url=api_url)
    try:
        opening = client.apps_connections_open(app_token=app_token.get_secret_value())
        await asyncio.wait_for(opening, PROBE_TIMEOUT_S)
        report("ok", "slack app token", "SLACK_APP_TOKEN works (Socket Mode can connect)")
    except Exception as exc:
        report("fail", "slack app token", f"apps.connections.open failed: {_slack_error(exc)}")
    finally:
        session = getattr(client, "session", None)
        if session is not None and not session.closed:
            await session.close()


def _slack_error(exc: BaseException) -> str:
    """Slack's error name (`invalid_auth`), or the failure's kind; never a token."""
    response: Any = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    if error:
        return str(error)
    if isinstance(exc, TimeoutError):
        return f"no answer within {PROBE_TIMEOUT_S:.0f} s"
    return type(exc).__name__
