"""Fixtures of the console's tests: a console over a real store, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bots.console.service import ConsoleService, open_console
from bots.settings import Settings
from storage.sqlite import SqliteStore
from tests.bots.console.browser import launch


def console_settings(tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", model="scripted", **overrides)


@asynccontextmanager
async def running_console(
    settings: Settings, store: Any, *, runner: Any = None, mode: str = "serve"
) -> AsyncIterator[ConsoleService]:
    console = await open_console(settings, store, runner=runner, mode=mode)
    await console.start("127.0.0.1", 0)
    try:
        yield console
    finally:
        await console.close()


StartConsole = Callable[..., AbstractAsyncContextManager[ConsoleService]]


@pytest.fixture
def start_console() -> StartConsole:
    return running_console


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with SqliteStore.open(tmp_path / "teammate.db") as opened:
        yield opened


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with launch() as opened:
        yield opened


# PostgreSQL, as the store's tests get it (a fresh schema per test; skipped, saying why,
# where no server can be started).
from tests.storage.conftest import pg_server, pg_url  # noqa: E402

__all__ = ["pg_server", "pg_url"]
