"""The console driving a real `teammate serve` (Socket Mode against the fake Slack, the real
Anthropic SDK against the fake API): a prompt changed in the console is what the model gets
in the channel's next answer, and audited; Stop on the Health page stops a running answer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.console.sessions import SESSION_COOKIE, Sessions
from tests.bots.console.browser import new_page, shoot
from tests.bots.console.test_console_cli import line_matching, start, stop
from tests.bots.test_cli import TIMEOUT_S, cli_env
from tests.bots.test_cli_serve import mention
from tests.fakes.anthropic_server import FakeAnthropic, text_reply
from tests.fakes.slack_server import TEAM_ID, FakeSlack

SECRET = "a-session-secret-for-the-console-tests"
CHANNEL = f"slack:{TEAM_ID}:C1"
URL = re.compile(r"Console: (http://127\.0\.0\.1:\d+)/")


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeSlack, FakeAnthropic]]:
    anthropic = FakeAnthropic()
    await anthropic.start()
    try:
        async with FakeSlack() as slack:
            yield slack, anthropic
    finally:
        await anthropic.close()


async def serving(
    tmp_path: Path, slack: FakeSlack, anthropic: FakeAnthropic
) -> tuple[asyncio.subprocess.Process, str]:
    env = cli_env(
        tmp_path,
        tmp_path / "data",
        anthropic,
        SLACK_BOT_TOKEN=slack.bot_token,
        SLACK_APP_TOKEN=slack.app_token,
        SLACK_API_URL=slack.api_url,
        TEAMMATE_SLACK__ADMINS='["UADMIN"]',
        TEAMMATE_CONSOLE__PORT="0",
        TEAMMATE_CONSOLE__SESSION_SECRET=SECRET,
    )
    process = await start(env, tmp_path, "serve")
    found = URL.search(await line_matching(process, r"Console: http://"))
    assert found is not None
    await slack.wait_for(lambda fake: fake.socket_connected, TIMEOUT_S)
    return process, found.group(1)


async def admin_page(browser: Any, base: str) -> Any:
    """A browser page signed in as the admin (a cookie signed with the configured secret)."""
    context, page = await new_page(browser)
    _session, cookie = Sessions(SECRET, lifetime_s=3600).new(
        "slack:UADMIN", "Ada", "admin", now=time.time()
    )
    await context.add_cookies([{"name": SESSION_COOKIE, "value": cookie, "url": base}])
    return page


def outcomes(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "data" / "teammate.db") as db:
        return [str(row[0]) for row in db.execute("SELECT outcome FROM runs ORDER BY id")]


async def test_a_prompt_changed_in_the_console_is_used_by_the_next_slack_answer_and_audited(
    tmp_path: Path, fakes: tuple[FakeSlack, FakeAnthropic], browser: Any
) -> None:
    slack, anthropic = fakes
    anthropic.add(text_reply("Ahoy."))
    process, base = await serving(tmp_path, slack, anthropic)
    try:
        page = await admin_page(browser, base)
        await page.goto(f"{base}/channels/{CHANNEL}")
        await page.fill("#prompt", "Always answer like a pirate.")
        await page.click("button:text-is('Save')")
        await page.wait_for_selector("text=Saved.")
        await shoot(page, "channel-config-saved")

        ts = await mention(slack, "hello")
        await slack.wait_for(lambda f: "Ahoy." in json.dumps(f.bot_replies("C1", ts)), TIMEOUT_S)
        # The channel's instructions reach the model as a context note in the conversation.
        sent = [json.dumps(body["messages"]) for body in anthropic.bodies]
        assert sent and all("Always answer like a pirate." in messages for messages in sent)

        await page.goto(f"{base}/audit")
        rows = await page.inner_text("table")
        assert "config.set" in rows and "slack:UADMIN" in rows and CHANNEL in rows
    finally:
        assert await stop(process) == 0


async def test_stop_on_the_health_page_stops_a_running_answer(
    tmp_path: Path, fakes: tuple[FakeSlack, FakeAnthropic], browser: Any
) -> None:
    slack, anthropic = fakes
    stuck = text_reply("This answer never ends")
    anthropic.add(dataclasses.replace(stuck, hang_after=3, hang_s=120))
    process, base = await serving(tmp_path, slack, anthropic)
    try:
        await mention(slack, "write a long essay")
        page = await admin_page(browser, base)

        async def stop_button() -> Any:
            while True:
                await page.goto(f"{base}/health")
                button = page.locator("button:has-text('Stop run')")
                if await button.count():
                    return button
                await asyncio.sleep(0.2)

        button = await asyncio.wait_for(stop_button(), TIMEOUT_S)
        await shoot(page, "health-running")
        await button.first.click()
        await page.wait_for_selector("text=to stop.")

        async def aborted() -> None:
            while True:  # the runner records the outcome once the model call is cancelled
                if outcomes(tmp_path) == ["aborted"]:
                    return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(aborted(), TIMEOUT_S)
        await page.goto(f"{base}/audit?action=run.stop")
        assert "slack:UADMIN" in await page.inner_text("table")
    finally:
        assert await stop(process) == 0
