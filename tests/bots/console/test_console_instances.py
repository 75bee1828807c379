"""Several instances over one PostgreSQL: each serves the same pages — a session made on one
is good on the other (the session secret is kept once in the database), and what one
changes the other shows at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bots.console.signin import create_link
from bots.settings import SlackSettings
from storage.postgres import PostgresStore
from tests.bots.console.browser import new_page, shoot
from tests.bots.console.conftest import StartConsole, console_settings

CHANNEL = "slack:T1:C1"


async def test_two_instances_over_one_postgresql_serve_the_same_pages(
    tmp_path: Path, pg_url: str, browser: Any, start_console: StartConsole
) -> None:
    settings = console_settings(tmp_path, slack=SlackSettings(admins=["UADMIN"]))
    async with (
        PostgresStore.open(pg_url) as store_a,
        PostgresStore.open(pg_url) as store_b,
        start_console(settings, store_a) as first,
        start_console(settings, store_b) as second,
    ):
        assert first.url != second.url
        link = await create_link(first.deps, "slack:UADMIN", by="terminal:root")
        context, page = await new_page(browser)
        await page.goto(second.url + link.removeprefix("http://127.0.0.1:8750"))
        await page.click("button:text-is('Sign in')")  # a link made by one, used on the other
        await page.wait_for_url(second.url + "/")
        # The session the second made is good on the first (same secret, from the database).
        [cookie] = [c for c in await context.cookies() if c["name"] == "teammate_console"]
        await context.add_cookies([{**cookie, "domain": "127.0.0.1", "path": "/"}])
        await page.goto(f"{second.url}/channels/{CHANNEL}")
        await page.fill("#note", "Deploys happen on Tuesdays.")
        await page.click("button:text-is('Keep note')")
        await page.wait_for_selector("text=Kept note")
        await page.goto(f"{first.url}/channels/{CHANNEL}")
        assert "/signin" not in page.url
        assert "Deploys happen on Tuesdays." in await page.inner_text("main")
        await shoot(page, "channel-on-the-other-instance")
        for console in (first, second):
            await page.goto(console.url + "/audit")
            text = await page.inner_text("table")
            assert "memory.add" in text and "console.sign_in" in text and "console.link" in text
            await page.goto(console.url + "/health")
            assert "Health" in await page.inner_text("h1")
