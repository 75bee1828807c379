"""Fixtures of the Slack tests: a fake Slack started per test, and a real AsyncWebClient on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import FakeSlack


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def slack_client(fake_slack: FakeSlack) -> AsyncIterator[AsyncWebClient]:
    """The real slack_sdk client on the fake, with no SDK-level retries (the code under test
    decides what to retry)."""
    client = AsyncWebClient(
        token=fake_slack.bot_token, base_url=fake_slack.api_url, retry_handlers=[]
    )
    yield client
    if client.session is not None:
        await client.session.close()
