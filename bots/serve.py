"""`teammate serve`, `teammate slack` and `teammate discord`: the chat platforms in one
process, one runner, one store.

Owns: `PLATFORMS`, the registry of platforms `serve` and `doctor` know (each a
`bots.platform.Platform`: Slack, Discord); choosing the configured ones and explaining in a few
lines what to set when none is; starting each on the shared runner, crash recovery once every
platform has started, scheduled work on the platforms running here, the process's one HTTP
server (the console, `/healthz`, `/metrics` and Slack HTTP mode's `/slack/events`:
`bots.console.process`) once every platform has connected, and a graceful stop on
SIGTERM or Ctrl-C: stop taking events, let running answers finish for a grace period, then stop
the rest (their messages stay in the store's inbox and are answered after the next start) and
close the store. A second Ctrl-C stops at once.

Must not: know a platform's payloads or credentials (its `Platform` does), or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from bots.app import open_app, require_model_credentials
from bots.console.process import ProcessHttp
from bots.platform import Platform, PlatformStartError, ServeOptions
from bots.platforms.discord.platform import DiscordPlatform
from bots.platforms.slack.platform import SlackPlatform
from bots.settings import Settings, SettingsError
from bots.surface.contract import Surface, SurfaceFactory

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0

# Every platform `serve` starts when configured, in this order (docs/architecture.md, "Adding
# a platform"). The terminal is not here: `teammate chat` and `ask` serve it.
PLATFORMS: tuple[type[Platform], ...] = (SlackPlatform, DiscordPlatform)


def configured_platforms(
    settings: Settings,
    options: ServeOptions,
    platforms: Sequence[type[Platform]] = PLATFORMS,
) -> list[type[Platform]]:
    """The configured ones of `platforms`; a `SettingsError` naming what a configured one
    still needs."""
    chosen = [platform for platform in platforms if platform.configured(settings)]
    for platform in chosen:
        platform.require(settings, options)
    return chosen


def nothing_configured_text(platforms: Sequence[type[Platform]] = PLATFORMS) -> str:
    return "\n".join(
        [
            "teammate: no chat platform is configured, so there is nothing to serve.",
            *(line for platform in platforms for line in platform.setup_hint()),
            "  To talk to Teammate in this terminal instead: teammate chat",
        ]
    )


class PlatformSurfaces:
    """The runner's `SurfaceFactory` for several platforms: by the key's platform prefix."""

    def __init__(self) -> None:
        self._by_platform: dict[str, SurfaceFactory] = {}

    def add(self, platform: str, factory: SurfaceFactory) -> None:
        self._by_platform[platform] = factory

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        factory = self._by_platform.get(conversation_key.split(":", 1)[0])
        return None if factory is None else factory.for_ref(conversation_key, ref)


async def serve(
    settings: Settings,
    options: ServeOptions | None = None,
    *,
    err: TextIO,
    platforms: Sequence[type[Platform]] = PLATFORMS,
    stop: asyncio.Event | None = None,
    grace_s: float = SHUTDOWN_GRACE_S,
    ready: Callable[[list[str]], None] | None = None,
    console: bool = False,
) -> int:
    """Run the configured ones of `platforms` until SIGTERM/SIGINT (or `stop`); the exit
    status. `ready(lines)` is called once every platform is connected. `console`: also the
    process's one HTTP server (`teammate serve`; a platform's own command runs alone)."""
    options = options or ServeOptions()
    chosen = configured_platforms(settings, options, platforms)
    if not chosen:
        raise SettingsError("no platform to start")
    for platform in chosen:
        require_model_credentials(settings, platform.name)
    http = ProcessHttp.for_serve(settings, options) if console else None
    if http is not None:
        options = http.options()  # a platform's HTTP endpoint joins the one server

    stop = stop or asyncio.Event()
    restore = _install_signal_handlers(stop, err)
    running = [platform(settings, options) for platform in chosen]
    surfaces = PlatformSurfaces()
    for each in running:
        surfaces.add(each.name, each.surfaces)
    # One runner for every platform; each channel's prompt carries its own platform's rules.
    platform_rules = {each.name: each.rules for each in running}

    async def shutdown(grace: float) -> None:
        if http is not None:
            await http.close()  # no new requests (acknowledged events are handed on)
        await asyncio.gather(*(each.stop(grace) for each in running))

    try:
        async with open_app(settings, platform_rules=platform_rules, surfaces=surfaces) as app:
            try:
                for each in running:
                    await each.start(app.runner)
                # Recovery once every platform has started: interrupted runs are reported
                # where they were shown, on whichever platform that was.
                await app.runner.recover()
                # Scheduled work, posted to whichever platforms run here (bots.features.scheduler).
                if app.scheduler is not None:
                    for each in running:
                        app.scheduler.add_platform(each.name, each)
                    app.scheduler.start()
                lines = [await each.connect() for each in running]
                served = [] if http is None else await http.start(app.store, app.runner)
            except PlatformStartError as exc:
                err.write(f"teammate: {exc}\n")
                await shutdown(0)
                return 1
            for line in [*lines, *served, "Ctrl-C or SIGTERM stops."]:
                err.write(f"teammate: {line}\n")
                log.info(line)
            err.flush()
            if ready is not None:
                ready(lines)
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
        if http is not None:
            await http.close()  # (already closed, unless the start failed midway)
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
