"""`teammate console` (the web console alone, over an existing database) and `teammate console
link --user slack:U0123` (one sign-in URL on stdout: good once, for ten minutes, audited).

Owns: opening the store for them (a SQLite file must exist already: this command never makes
a blank database), refusing a link for someone who could not get in, the console's lifetime
until SIGTERM or Ctrl-C. Must not: start a chat platform or a runner (a Stop is published to
the instance that runs the conversation when the database is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import re
import signal
import sys

from bots.app import open_store
from bots.cli.common import settings_from, start_logging
from bots.console.roles import role_for
from bots.console.service import console_deps, open_console
from bots.console.signin import create_link
from bots.settings import Settings, SettingsError
from storage.base import ConversationStore

_PERSON = re.compile(r"^(slack:[A-Z0-9]{1,32}|discord:[0-9]{1,20})$")


async def _existing_store(settings: Settings) -> ConversationStore:
    if settings.database_url is None and not settings.database_path.is_file():
        raise SettingsError(
            f"no database at {settings.database_path} (TEAMMATE_DATA_DIR): `teammate serve` "
            "makes it; the console only reads and changes an existing one"
        )
    return await open_store(settings)


def console_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    start_logging(settings, args)
    return asyncio.run(_serve_console(settings))


async def _serve_console(settings: Settings) -> int:
    store = await _existing_store(settings)
    try:
        console = await open_console(settings, store, mode="console")
        try:
            await console.start()
        except OSError as exc:
            raise SettingsError(
                f"[console] cannot listen on {settings.console.host}:{settings.console.port}: "
                f"{exc.strerror or type(exc).__name__}"
            ) from None
        try:
            sys.stderr.write(f"teammate: console at {console.url}/ (Ctrl-C stops)\n")
            sys.stderr.flush()
            await _until_stopped()
        finally:
            await console.close()
    finally:
        await store.close()
    return 0


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def link_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    person = args.user.strip()
    if not _PERSON.match(person):
        raise SettingsError("--user: a platform-qualified id, e.g. slack:U0123 or discord:1234")
    if role_for(settings, person) is None:
        raise SettingsError(
            f"{person} may not use the console: add them to [slack] admins, [discord] "
            "admin_users or [console] viewers first"
        )
    start_logging(settings, args)
    url = asyncio.run(_link(settings, person))
    sys.stdout.write(url + "\n")
    return 0


async def _link(settings: Settings, person: str) -> str:
    store = await _existing_store(settings)
    try:
        deps = await console_deps(settings, store, mode="console")
        return await create_link(deps, person, by=f"terminal:{getpass.getuser()}")
    finally:
        await store.close()
