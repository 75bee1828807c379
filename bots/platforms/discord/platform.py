"""Discord as one platform of `teammate serve` / `teammate discord`, and its set-up checks.

Owns: what Discord needs to run (`DISCORD_BOT_TOKEN`, with `DISCORD_API_URL` /
`DISCORD_GATEWAY_URL` for a Discord-compatible server), the invite URL (the `bot` and
`applications.commands` scopes and exactly the permissions the README lists, from
`discord.Permissions`), the token checks `teammate doctor` and `teammate discord invite` make
(`GET /users/@me`, `GET /oauth2/applications/@me` at the API base: never printing the token),
and `DiscordPlatform` (a `bots.platform.Platform`): starting `TeammateBot` on the shared runner,
waiting until it is on the gateway, and stopping it gracefully (no new work, answers in progress
get the grace period).

Must not: know Discord's payloads (bots.platforms.discord does) or import bots.platforms.slack.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import aiohttp

from bots.features.scheduler import StartedThread
from bots.platform import PlatformStartError, Report, ServeOptions
from bots.runner import ConversationRunner
from bots.settings import Settings, SettingsError

if TYPE_CHECKING:
    import discord

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://discord.com/api/v10"
CHECK_TIMEOUT_S = 10.0
START_TIMEOUT_S = 60.0
# Application flags: the Message Content intent is switched on in the Developer Portal.
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)  # GATEWAY_MESSAGE_CONTENT(_LIMITED)
SCOPES = ("bot", "applications.commands")


def bot_permissions() -> discord.Permissions:
    """What the bot needs in the channels it serves (README, "Discord")."""
    import discord  # (here: a process that serves only Slack never pays for importing it)

    return discord.Permissions(
        view_channel=True,
        send_messages=True,
        send_messages_in_threads=True,
        create_public_threads=True,
        embed_links=True,
        attach_files=True,
        read_message_history=True,
        add_reactions=True,
    )


def invite_url(application_id: str) -> str:
    import discord

    return discord.utils.oauth_url(application_id, permissions=bot_permissions(), scopes=SCOPES)


def discord_configured(settings: Settings) -> bool:
    token = settings.discord_bot_token
    return token is not None and bool(token.get_secret_value())


def require_discord(settings: Settings) -> str:
    """The bot token, or a `SettingsError` naming what is missing."""
    if not discord_configured(settings):
        raise SettingsError(
            "DISCORD_BOT_TOKEN is not set (Developer Portal → your application → Bot → Reset "
            'Token; README.md, "Discord")'
        )
    token = settings.discord_bot_token
    assert token is not None
    return token.get_secret_value()


def api_url(settings: Settings) -> str:
    return (settings.discord_api_url or DEFAULT_API_URL).rstrip("/")


def intent_mode(settings: Settings) -> str:
    if settings.discord.message_content:
        return (
            "with the Message Content intent: messages in Teammate's threads continue "
            "conversations (enable it in the Developer Portal → Bot → Privileged Gateway Intents)"
        )
    return "without the Message Content intent: mentions, replies to Teammate and DMs only"


class DiscordCheckError(PlatformStartError):
    """A token check failed; the text is safe to show (never the token)."""


async def get_json(settings: Settings, path: str) -> dict[str, Any]:
    """GET `path` at the API base with the bot token."""
    token = require_discord(settings)
    url = api_url(settings) + path
    timeout = aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers={"Authorization": f"Bot {token}"}) as response,
        ):
            if response.status == 401:
                raise DiscordCheckError(f"GET {url}: 401, DISCORD_BOT_TOKEN was refused")
            if response.status != 200:
                raise DiscordCheckError(f"GET {url}: HTTP {response.status}")
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        reason = "no answer in time" if isinstance(exc, TimeoutError) else type(exc).__name__
        raise DiscordCheckError(f"GET {url}: {reason}") from None
    except ValueError:
        raise DiscordCheckError(f"GET {url}: the answer is not JSON") from None
    if not isinstance(body, dict):
        raise DiscordCheckError(f"GET {url}: unexpected answer")
    return body


async def application_id(settings: Settings) -> str:
    """The application's id, from the token (`GET /oauth2/applications/@me`)."""
    if not discord_configured(settings):
        raise SettingsError(
            "DISCORD_BOT_TOKEN is not set (needed to look up the application's id); or give "
            "the id: --application-id ID (Developer Portal → General Information)"
        )
    found = (await get_json(settings, "/oauth2/applications/@me")).get("id")
    if not isinstance(found, str) or not found.isdigit():
        raise DiscordCheckError("GET /oauth2/applications/@me: no application id in the answer")
    return found


async def check_discord(settings: Settings, report: Report) -> None:
    """`teammate doctor`'s Discord lines."""
    if not discord_configured(settings):
        report("info", "discord", "not configured (DISCORD_BOT_TOKEN is not set)")
        return
    try:
        me = await get_json(settings, "/users/@me")
    except DiscordCheckError as exc:
        report("fail", "discord", str(exc))
        return
    name, user_id = me.get("username"), me.get("id")
    report("ok", "discord", f"DISCORD_BOT_TOKEN works: @{name} ({user_id}) via {api_url(settings)}")
    mode = intent_mode(settings)
    try:
        app = await get_json(settings, "/oauth2/applications/@me")
    except DiscordCheckError as exc:
        report("warn", "discord intents", f"{mode}; the application could not be read: {exc}")
        return
    flags = app.get("flags")
    granted = isinstance(flags, int) and bool(flags & MESSAGE_CONTENT_FLAGS)
    if settings.discord.message_content and not granted:
        report(
            "warn",
            "discord intents",
            f"{mode}; the application does not show it enabled: the gateway will refuse the "
            "connection until it is (or set [discord] message_content = false)",
        )
    else:
        report("ok", "discord intents", f"runs {mode}")
    report_public(app, settings, report)


def report_public(app: dict[str, Any], settings: Settings, report: Report) -> None:
    """A public bot can be added to any server by anyone, who can then mention or DM it."""
    if not app.get("bot_public"):
        report("ok", "discord access", "the application is private: only its owner adds it")
        return
    config = settings.discord
    lists = config.allowed_guilds or config.allowed_channels or config.allowed_roles
    guarded = (
        "; the allow-lists keep strangers out"
        if lists or config.allowed_users
        else (
            ": anyone who adds it to a server of their own can use its tools on your budget, "
            "there and by DM. Set [discord] allowed_guilds (or allowed_users)"
        )
    )
    report(
        "warn",
        "discord access",
        "the application is public (Developer Portal → Bot → Public Bot)"
        + guarded
        + "; turn Public Bot off unless others must add it",
    )


@dataclass(slots=True, frozen=True)
class DiscordIdentity:
    name: str
    user_id: str


class DiscordPlatform:
    """`TeammateBot` on a shared runner (a `bots.platform.Platform`): start, and a graceful
    stop. It takes events from `start` on: the gateway connects and syncs in one step."""

    name: ClassVar[str] = "discord"

    def __init__(self, settings: Settings, options: ServeOptions | None = None) -> None:
        from bots.platforms.discord.surface import DiscordSurfaces

        self.settings = settings
        self.surfaces = DiscordSurfaces()
        self.identity: DiscordIdentity | None = None
        self._bot: Any = None
        self._task: asyncio.Task[None] | None = None
        self._restore: Callable[[], None] | None = None

    @classmethod
    def configured(cls, settings: Settings) -> bool:
        return discord_configured(settings)

    @classmethod
    def require(cls, settings: Settings, options: ServeOptions) -> None:
        require_discord(settings)

    @classmethod
    def setup_hint(cls) -> list[str]:
        return [
            "  Discord: set DISCORD_BOT_TOKEN (Developer Portal → Bot); `teammate discord invite`",
            "           prints the link that adds the bot to a server (see README.md).",
        ]

    @classmethod
    async def doctor(cls, settings: Settings, report: Report) -> None:
        await check_discord(settings, report)

    @property
    def rules(self) -> str:
        from bots.platforms.discord.bot import DISCORD_RULES

        return DISCORD_RULES

    async def start(self, runner: ConversationRunner) -> None:
        """Log in, connect to the gateway and sync the commands; raises `DiscordCheckError`
        when Discord refuses (the token, or the Message Content intent)."""
        from bots.platforms.discord.bot import create_bot
        from bots.platforms.discord.payloads import use_endpoints

        token = require_discord(self.settings)
        self._restore = use_endpoints(
            self.settings.discord_api_url, self.settings.discord_gateway_url
        )
        bot = create_bot(runner, self.settings, surfaces=self.surfaces)  # sharding as configured
        self._bot = bot
        self._task = asyncio.create_task(bot.start(token), name="discord gateway")
        ready = asyncio.create_task(bot.wait_until_ready())
        done, _ = await asyncio.wait(
            {self._task, ready}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            problem = "no gateway connection within 60 s"
            if self._task in done:
                problem = _start_error(self._task.exception())
            await self.shutdown(grace_s=0)
            raise DiscordCheckError(problem)
        user = bot.user
        assert user is not None
        self.identity = DiscordIdentity(name=user.name, user_id=str(user.id))

    async def connect(self) -> str:
        """Connected since `start`: the line saying so."""
        assert self.identity is not None
        return f"Discord: connected as @{self.identity.name}, {intent_mode(self.settings)}."

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        """Scheduled work (`bots.features.scheduler.ThreadStarter`), through the running bot."""
        if self._bot is None:
            raise RuntimeError("Discord is not connected")
        started: StartedThread = await self._bot.start_thread(channel_key, text, for_user=for_user)
        return started

    async def stop(self, grace_s: float) -> None:
        await self.shutdown(grace_s=grace_s)

    async def shutdown(self, *, grace_s: float) -> None:
        """No new work; answers in progress get `grace_s`; then the gateway and the REST
        session close. Safe to call twice."""
        bot, self._bot = self._bot, None
        if bot is not None:
            await bot.stop_taking_work(grace_s=grace_s)
            await bot.close()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._restore is not None:
            self._restore()
            self._restore = None


def _start_error(exc: BaseException | None) -> str:
    import discord

    if isinstance(exc, discord.LoginFailure):
        return "Discord refused DISCORD_BOT_TOKEN"
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return (
            "Discord refused the Message Content intent: enable it in the Developer Portal → "
            "Bot → Privileged Gateway Intents, or set [discord] message_content = false"
        )
    if isinstance(exc, discord.HTTPException):
        return f"Discord answered HTTP {exc.status} while starting"
    return f"the Discord connection failed ({type(exc).__name__})"
