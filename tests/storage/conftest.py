"""Fixtures for the store's tests: the contract on every backend, and a clock the test moves.

`store` and `backend` are parametrized over SQLite (a real file) and PostgreSQL (a real
server: see `tests/storage/pg.py`; a fresh schema per test), so one contract suite runs on
both and they cannot drift. Tests of SQLite's own machinery (group commit, file integrity,
its migrations) use `sqlite_store`. Without a PostgreSQL server the PostgreSQL cases are
skipped, and the end of the run says why.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from storage.base import ConversationStore
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests.storage import pg

BACKENDS = ["sqlite", "postgres"]


class FakeClock:
    """Time that only moves when a test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(slots=True)
class Backend:
    """One database on one backend; `open()` opens a store on it (again after a "restart",
    or twice at once, as two processes or instances would)."""

    name: str
    opener: Callable[..., AbstractAsyncContextManager[Any]]

    def open(self, clock: Callable[[], float] | None = None) -> AbstractAsyncContextManager[Any]:
        return self.opener(clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "teammate.db"


_SKIPPED_POSTGRES: list[str] = []


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg.PgServer | None]:
    """A PostgreSQL server for this test session (started once, stopped at the end)."""
    with pg.server() as found:
        if found is None:
            _SKIPPED_POSTGRES.append(pg.unavailable_reason)
        yield found


@pytest.fixture
async def pg_url(pg_server: pg.PgServer | None) -> AsyncIterator[str]:
    """A fresh, empty schema on the test server, as a URL; dropped afterwards."""
    if pg_server is None:
        pytest.skip(f"PostgreSQL unavailable: {pg.unavailable_reason}")
    schema = await pg_server.create_schema()
    try:
        yield pg_server.schema_url(schema)
    finally:
        await pg_server.drop_schema(schema)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, db_path: Path) -> Backend:
    if request.param == "sqlite":

        def open_sqlite(clock: Callable[[], float] | None) -> AbstractAsyncContextManager[Any]:
            return SqliteStore.open(db_path, clock=clock or time.time)

        return Backend("sqlite", open_sqlite)
    url: str = request.getfixturevalue("pg_url")

    def open_postgres(clock: Callable[[], float] | None) -> AbstractAsyncContextManager[Any]:
        return PostgresStore.open(url, clock=clock or time.time)

    return Backend("postgres", open_postgres)


@pytest.fixture
async def store(backend: Backend, clock: FakeClock) -> AsyncIterator[ConversationStore]:
    async with backend.open(clock) as opened:
        yield opened


@pytest.fixture
async def sqlite_store(db_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    async with SqliteStore.open(db_path, clock=clock) as opened:
        yield opened


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SKIPPED_POSTGRES:
        terminalreporter.write_sep("=", "PostgreSQL tests skipped", yellow=True)
        terminalreporter.write_line(f"no PostgreSQL server: {_SKIPPED_POSTGRES[0]}")
