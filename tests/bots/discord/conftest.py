"""Fixtures for the Discord tests: a `FakeDiscord` per test, with discord.py aimed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.discord_server import FakeDiscord, point_discord_py_at


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """A started fake; discord.py's process-global URLs point at it until teardown."""
    fake = FakeDiscord()
    await fake.start()
    restore = point_discord_py_at(fake)
    try:
        yield fake
    finally:
        restore()
        await fake.close()
