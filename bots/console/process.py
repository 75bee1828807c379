"""The one HTTP server of `teammate serve`: the console, `/healthz`, `/metrics`, and what a
platform mounts on it (Slack HTTP mode's `/slack/events`).

Owns: `ProcessHttp` — the `ServeOptions.mount` hook platforms add their routes through, the
address (a platform's HTTP-mode `--host`/`--port` when one mounted a route, since the chat
service must reach it; else `[console] host`/`port`), whether the console's pages are served
there (only on this machine's loopback or with a sign-in provider configured: a page is never
offered to the network with nobody able to sign in properly), starting it once every platform
has connected, and closing it.

A console-only server that cannot bind (the port is taken) is reported in one line and serve
goes on without it; a server a platform needs fails the start.

Must not: name a platform; write SQL.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bots.console.service import ConsoleService, check_console_settings, console_deps
from bots.console.settings import is_loopback
from bots.console.signin import sign_in_configured
from bots.platform import PlatformStartError, ServeOptions
from bots.settings import Settings
from storage.base import ConversationStore

if TYPE_CHECKING:
    from aiohttp import web

    from bots.runner import ConversationRunner

log = logging.getLogger(__name__)


class ProcessHttp:
    """Made before the platforms (`options` carries its mount hook), started after them."""

    def __init__(self, settings: Settings, options: ServeOptions) -> None:
        self.settings = settings
        self._asked = options
        self._routes: list[tuple[str, Callable[[Any], Awaitable[Any]]]] = []
        self.service: ConsoleService | None = None

    @classmethod
    def for_serve(cls, settings: Settings, options: ServeOptions) -> ProcessHttp | None:
        """None when `[console] enabled = false` (a platform then listens itself). A
        console-only server on an unsafe address: `SettingsError`, before anything starts."""
        if not settings.console.enabled:
            return None
        if not options.http:
            check_console_settings(settings)
        return cls(settings, options)

    def options(self) -> ServeOptions:
        return dataclasses.replace(self._asked, mount=self._mount)

    def _mount(self, path: str, handler: Callable[[Any], Awaitable[Any]]) -> None:
        self._routes.append((path, handler))

    def _address(self) -> tuple[str, int]:
        if self._routes:
            return self._asked.host, self._asked.port
        return self.settings.console.host, self.settings.console.port

    async def start(self, store: ConversationStore, runner: ConversationRunner) -> list[str]:
        """Listen; the lines saying where (or why the console is not served)."""
        host, port = self._address()
        pages = is_loopback(host) or sign_in_configured(self.settings)
        if not self._routes and not pages:
            check_console_settings(self.settings)  # raises: refused before, kept as a guard
        deps = await console_deps(self.settings, store, runner=runner, mode="serve")
        routes = list(self._routes)

        def mount_routes(app: web.Application) -> None:
            for path, handler in routes:
                app.router.add_post(path, handler)

        self.service = ConsoleService(deps, mounts=[mount_routes], pages=pages)
        try:
            bound = await self.service.start(host, port)
        except OSError as exc:
            self.service = None
            reason = exc.strerror or type(exc).__name__
            if routes:
                raise PlatformStartError(f"cannot listen on {host}:{port}: {reason}") from None
            log.warning("console: cannot listen on %s:%s: %s", host, port, reason)
            return [f"Console: not served (cannot listen on {host}:{port}: {reason})."]
        shown = f"http://{host}:{bound}"
        also = "".join(f", {path}" for path, _handler in routes)
        if not pages:
            return [
                f"HTTP: {shown} serves /healthz{also}; the console is not served on {host} "
                "without a sign-in provider (SLACK_CLIENT_ID and SLACK_CLIENT_SECRET, or "
                "DISCORD_CLIENT_ID and DISCORD_CLIENT_SECRET)."
            ]
        return [f"Console: {shown}/ (also /healthz{also})."]

    async def close(self) -> None:
        if self.service is not None:
            service, self.service = self.service, None
            await service.close()
