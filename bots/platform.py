"""The `Platform` contract: what a chat platform gives `teammate serve` and `teammate doctor`
(docs/architecture.md, "Adding a platform").

Owns: the `Platform` protocol (its class-level checks: `configured`, `require`, `setup_hint`,
`doctor`; and, per process, the rules for the prompt, the surfaces, start, connect, a graceful
stop and the scheduled-work hook), `ServeOptions` (what `serve` was asked on the command line),
`PlatformStartError` (a platform refused to start: one line, no secret in it) and `Report`,
the shape of doctor's lines.

Must not: import a platform's package (each adapter implements this; `bots.serve.PLATFORMS`
lists them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from bots.settings import Settings
from bots.surface.contract import SurfaceFactory

if TYPE_CHECKING:
    from bots.features.scheduler import StartedThread
    from bots.runner import ConversationRunner

DEFAULT_HTTP_PORT = 3000

Status = Literal["ok", "info", "warn", "fail"]
# Adds a POST route (path, aiohttp handler) to the process's one HTTP server (bots.console).
MountRoute = Callable[[str, Callable[[Any], Awaitable[Any]]], None]
Report = Callable[[Status, str, str], None]


@dataclass(slots=True, frozen=True)
class ServeOptions:
    """What `serve` (or a platform's own command) was asked; each platform reads its part.

    `http`: Slack in HTTP mode (True), Socket Mode (False), or from the credentials (None);
    `host`/`port`: where HTTP mode listens; `mount`: when set, HTTP mode adds its route to the
    process's one HTTP server (the console's, which then listens at `host`/`port`) instead of
    listening itself."""

    http: bool | None = None
    host: str = "0.0.0.0"
    port: int = DEFAULT_HTTP_PORT
    mount: MountRoute | None = None


class PlatformStartError(Exception):
    """A platform refused to start (a token, a permission): one line, safe to show."""


class Platform(Protocol):
    """One chat platform served by `teammate serve`: a class, constructed once per process for
    the settings and options when it is configured.

    The order `serve` follows: `require` (all platforms), construct, `open_app` with every
    platform's `rules` and `surfaces`, `start(runner)` (all platforms), `runner.recover()`,
    the scheduler (`start_thread`), `connect()` (all platforms), and on SIGTERM `stop(grace_s)`.
    """

    name: ClassVar[str]
    """The conversation and channel keys' prefix (`slack`, `discord`); also the name of the
    platform's key in `[channels]` and in the model credentials check."""

    def __init__(self, settings: Settings, options: ServeOptions) -> None: ...

    @classmethod
    def configured(cls, settings: Settings) -> bool:
        """Whether its credentials are set (`serve` starts every configured platform)."""
        ...

    @classmethod
    def require(cls, settings: Settings, options: ServeOptions) -> None:
        """A `SettingsError` naming every missing credential (for these options)."""
        ...

    @classmethod
    def setup_hint(cls) -> list[str]:
        """Lines saying what to set, for `serve` when no platform is configured."""
        ...

    @classmethod
    async def doctor(cls, settings: Settings, report: Report) -> None:
        """`teammate doctor`'s lines (`info` when not configured); never prints a secret."""
        ...

    @property
    def surfaces(self) -> SurfaceFactory:
        """Surfaces for earlier runs' refs (the runner's `SurfaceFactory`, for recovery)."""
        ...

    @property
    def rules(self) -> str:
        """The platform's rules for the system prompt (how replies are rendered there)."""
        ...

    async def start(self, runner: ConversationRunner) -> None:
        """Sign in and register with the runner; raises `PlatformStartError`. Takes no events
        yet unless the platform cannot separate the two (then recovery follows at once)."""
        ...

    async def connect(self) -> str:
        """After recovery: take events; the line saying where (`Slack: connected as …`)."""
        ...

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        """Scheduled work (`bots.features.scheduler.ThreadStarter`): post `text` in the channel and
        open its thread."""
        ...

    async def stop(self, grace_s: float) -> None:
        """No new events; answers in progress get `grace_s`; then close. Safe to call twice,
        and after a failed `start`."""
        ...
