"""Pieces of the fault scenarios (issue 13): the assembled Slack app (real bolt app, slack_sdk,
runner, SQLite store, `ModelFactory` and `AnthropicModel`) against FakeSlack and FakeAnthropic,
with recognisable fake secrets, fast retries and a short model idle timeout.

Used by tests/chaos/test_fault_*.py and benchmarks/chaos_faults.py; nothing here is mocked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bots.app import ModelFactory, open_store, toolset_factory
from bots.platforms.slack.app import SLACK_RULES, SlackBot
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.models.anthropic import RetryPolicy
from storage.base import ConversationStore
from storage.sqlite import SqliteStore
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack_server import FakeSlack, signed_request

# Recognisable fake secrets: none of them may ever appear in a log line, a posted message, an
# error text or a stored row (tests/chaos/test_secrets_*.py looks for each).
ANTHROPIC_KEY = "sk-ant-FAKEKEY-0123456789abcdefSECRET"
SLACK_BOT_TOKEN = "xoxb-FAKE-BOT-TOKEN-1234567890SECRET"
SLACK_APP_TOKEN = "xapp-FAKE-APP-TOKEN-1234567890SECRET"
SIGNING_SECRET = "FAKE-SIGNING-SECRET-1234567890abcdef"
DISCORD_TOKEN = "FAKE.DISCORD-TOKEN.1234567890SECRET"
SECRETS = (ANTHROPIC_KEY, SLACK_BOT_TOKEN, SLACK_APP_TOKEN, SIGNING_SECRET, DISCORD_TOKEN)

MODEL_ID = "claude-sonnet-5-5"
# Backoff that doubles from 50 ms: the policy of production, on a test's time scale.
FAST_RETRY = RetryPolicy(max_retries=3, initial_delay_s=0.05, max_delay_s=0.4)
IDLE_TIMEOUT_S = 0.5


@asynccontextmanager
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    fake = FakeAnthropic(api_key=ANTHROPIC_KEY)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


def fake_slack() -> FakeSlack:
    return FakeSlack(bot_token=SLACK_BOT_TOKEN, app_token=SLACK_APP_TOKEN)


@dataclass
class SlackApp:
    """The app as `teammate slack --http` assembles it, on the caller's fakes."""

    slack: FakeSlack
    model_api: FakeAnthropic
    bot: SlackBot
    runner: ConversationRunner
    store: ConversationStore
    settings: Settings
    port: int

    async def mention(
        self, text: str, *, channel: str = "C1", user: str = "UALICE", thread_ts: str | None = None
    ) -> str:
        """Post a mention as a person does and deliver Slack's signed event; returns its ts."""
        full = f"<@{self.slack.bot_user_id}> {text}"
        stored = self.slack.seed_message(channel, full, user=user, thread_ts=thread_ts)
        event: dict[str, Any] = {
            "type": "app_mention",
            "user": user,
            "text": full,
            "ts": stored["ts"],
            "channel": channel,
            "event_ts": stored["ts"],
            "team": self.slack.team_id,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        url = f"http://127.0.0.1:{self.port}/slack/events"
        response = await signed_request(url, self.slack.event_callback(event), SIGNING_SECRET)
        assert response.status == 200, response.status
        return str(stored["ts"])

    async def settle(self, limit_s: float = 60.0) -> None:
        async def _settle() -> None:
            await self.bot.drain()
            await self.runner.wait_all()

        await asyncio.wait_for(_settle(), limit_s)


def app_settings(
    slack: FakeSlack, model_api: FakeAnthropic, data_dir: Path, **overrides: Any
) -> Settings:
    fields: dict[str, Any] = {
        "data_dir": data_dir,
        "model": MODEL_ID,
        "thinking": "off",
        "anthropic_api_key": ANTHROPIC_KEY,
        "anthropic_base_url": model_api.url,
        "model_idle_timeout_s": IDLE_TIMEOUT_S,
        "slack_bot_token": slack.bot_token,
        "slack_app_token": slack.app_token,
        "slack_signing_secret": SIGNING_SECRET,
        "slack_api_url": slack.api_url,
    }
    return Settings(**(fields | overrides))


@asynccontextmanager
async def slack_app(
    slack: FakeSlack,
    model_api: FakeAnthropic,
    data_dir: Path,
    *,
    retry: RetryPolicy = FAST_RETRY,
    busy_timeout_s: float = 10.0,
    **overrides: Any,
) -> AsyncIterator[SlackApp]:
    settings = app_settings(slack, model_api, data_dir, **overrides)
    bot = SlackBot(settings)
    store: ConversationStore
    if settings.database_url is not None:  # PostgreSQL, as `teammate` opens it
        store = await open_store(settings)
    else:
        store = await SqliteStore.open(settings.database_path, busy_timeout_s=busy_timeout_s)
    models = ModelFactory(settings, retry=retry)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=models,
        toolset_factory=toolset_factory(settings),
        platform_rules=SLACK_RULES,
        surfaces=bot.surfaces,
    )
    try:
        await bot.start(runner)
        await runner.recover()
        port = await bot.listen_http("127.0.0.1", 0)
        yield SlackApp(slack, model_api, bot, runner, store, settings, port)
    finally:
        await bot.shutdown(grace_s=5.0)
        await runner.close()
        await models.aclose()
        await store.close()


class LogCapture(logging.Handler):
    """Every formatted log line (with tracebacks) of the root logger, while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)
