"""The fake Messages API and a strict SDK client on it, for the model tests of tests/core.

A test module names its key as `API_KEY` (the key redaction tests look for it in what people
would see); `fake` refuses any other, and `client` validates every response against the SDK's
own models, so a test cannot pass on a reply the real API would never send."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest

from tests.fakes.anthropic_server import FakeAnthropic


def _key(request: pytest.FixtureRequest) -> str:
    return str(getattr(request.module, "API_KEY", "sk-ant-api03-test-key"))


@pytest.fixture
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=_key(request))
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def client(
    request: pytest.FixtureRequest, fake: FakeAnthropic
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(
        api_key=_key(request), base_url=fake.url, max_retries=0, _strict_response_validation=True
    )
    yield sdk
    await sdk.close()
