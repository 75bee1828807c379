"""Fixtures for the store's tests: a store on a real file, and a clock the test moves.

`store` runs every contract test against each SQLite implementation (today's database thread
and the aiosqlite one that replaces it), so the two cannot drift while both exist."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.sqlite import SqliteStore
from storage.sqlite_aio import AioSqliteStore


class FakeClock:
    """Time that only moves when a test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "teammate.db"


SQLITE_STORES = {"sqlite-thread": SqliteStore, "sqlite-aio": AioSqliteStore}


@pytest.fixture(params=sorted(SQLITE_STORES))
async def store(
    request: pytest.FixtureRequest, db_path: Path, clock: FakeClock
) -> AsyncIterator[SqliteStore]:
    opening = SQLITE_STORES[request.param].open(db_path, clock=clock)
    async with opening as opened:
        yield opened  # type: ignore[misc]  # either store: the contract is the same
