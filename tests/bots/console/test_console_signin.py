"""Signing in to the console in a real browser: with Slack (OpenID Connect) and Discord
(OAuth2, roles read from the guild) against the fakes, a one-time link, and refusals — someone
who is neither admin nor viewer, a callback replayed, a link used twice. Each sign-in is
audited; a refused one makes no session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from bots.console.signin import create_link
from bots.settings import DiscordSettings, SlackSettings
from tests.bots.console.browser import new_page, shoot
from tests.bots.console.conftest import StartConsole, console_settings
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.slack_server import FakeSlack

GUILD = "555000000000000001"
ADMIN_ROLE = "777000000000000001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.oidc.register("slack-client", "slack-secret")
        yield fake


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    fake = FakeDiscord()
    await fake.start()
    fake.oauth.register("4242", "discord-secret")
    try:
        yield fake
    finally:
        await fake.close()


def slack_settings(tmp_path: Path, slack: FakeSlack) -> Any:
    return console_settings(
        tmp_path,
        slack_api_url=slack.api_url,
        slack_client_id="slack-client",
        slack_client_secret=SecretStr("slack-secret"),
        slack=SlackSettings(admins=["UADMIN"]),
        console={"viewers": ["slack:UVIEW"]},
    )


async def test_sign_in_with_slack_makes_an_audited_session(
    tmp_path: Path, slack: FakeSlack, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    slack.oidc.signs_in("UADMIN", name="Ada")
    async with start_console(slack_settings(tmp_path, slack), sqlite_store) as console:
        context, page = await new_page(browser)
        await page.goto(console.url + "/health")  # sent to sign in, then back here
        await page.click("text=Sign in with Slack")
        await page.wait_for_url(console.url + "/health")
        assert "Ada · admin" in await page.inner_text("header")
        await shoot(page, "signed-in-with-slack")
        [cookie] = [c for c in await context.cookies() if c["name"] == "teammate_console"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        [entry] = await sqlite_store.audit_entries(limit=5, action="console.sign_in")
        assert (entry.actor, entry.target, entry.detail) == (
            "slack:UADMIN",
            "admin",
            {"with": "slack"},
        )
        assert entry.origin == "console 127.0.0.1"
        # The code was exchanged once, for the redirect it was issued to, with the secret.
        [exchange] = slack.oidc.exchanges
        assert exchange["redirect_uri"] == console.url + "/auth/slack/callback"
        assert all(code.used for code in slack.oidc.codes.values())


async def test_someone_neither_admin_nor_viewer_is_refused_with_no_session(
    tmp_path: Path, slack: FakeSlack, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    slack.oidc.signs_in("UNOBODY")
    async with start_console(slack_settings(tmp_path, slack), sqlite_store) as console:
        context, page = await new_page(browser)
        await page.goto(console.url + "/signin")
        await page.click("text=Sign in with Slack")
        await page.wait_for_selector("text=may not use this console")
        await shoot(page, "sign-in-refused")
        assert not [c for c in await context.cookies() if c["name"] == "teammate_console"]
        assert await sqlite_store.audit_entries(limit=5) == []
        response = await page.goto(console.url + "/")
        assert response is not None and "/signin" in page.url


async def test_a_viewer_signs_in_read_only_and_a_replayed_callback_is_refused(
    tmp_path: Path, slack: FakeSlack, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    slack.oidc.signs_in("UVIEW")
    async with start_console(slack_settings(tmp_path, slack), sqlite_store) as console:
        _context, page = await new_page(browser)
        await page.goto(console.url + "/signin")
        callbacks: list[str] = []
        page.on("request", lambda r: callbacks.append(r.url) if "/callback" in r.url else None)
        await page.click("text=Sign in with Slack")
        await page.wait_for_url(console.url + "/")
        assert "viewer" in await page.inner_text("header")
        # The same callback again (its code used, its state cookie gone): refused.
        other, replay = await new_page(browser)
        await replay.goto(callbacks[0])
        assert "not started here" in await replay.inner_text("main")
        assert not [c for c in await other.cookies() if c["name"] == "teammate_console"]


async def test_sign_in_with_discord_reads_the_admin_role_from_the_guild(
    tmp_path: Path,
    discord: FakeDiscord,
    sqlite_store: Any,
    browser: Any,
    start_console: StartConsole,
) -> None:
    settings = console_settings(
        tmp_path,
        discord_api_url=discord.api_base,
        discord_client_id="4242",
        discord_client_secret=SecretStr("discord-secret"),
        discord=DiscordSettings(admin_roles=[ADMIN_ROLE]),
        console={"discord_guild_id": GUILD},
    )
    discord.oauth.signs_in("9001", "grace", roles={GUILD: ["1", ADMIN_ROLE]})
    async with start_console(settings, sqlite_store) as console:
        _context, page = await new_page(browser)
        await page.goto(console.url + "/signin")
        await page.click("text=Sign in with Discord")
        await page.wait_for_url(console.url + "/")
        assert "grace · admin" in await page.inner_text("header")
        [entry] = await sqlite_store.audit_entries(limit=5, action="console.sign_in")
        assert (entry.actor, entry.detail) == ("discord:9001", {"with": "discord"})
        # Without the role: refused.
        discord.oauth.signs_in("9002", "mallory", roles={GUILD: ["1"]})
        _other, page = await new_page(browser)
        await page.goto(console.url + "/signin")
        await page.click("text=Sign in with Discord")
        await page.wait_for_selector("text=may not use this console")


async def test_a_one_time_link_signs_in_once(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = console_settings(tmp_path, slack=SlackSettings(admins=["UADMIN"]))
    async with start_console(settings, sqlite_store) as console:
        link = await create_link(console.deps, "slack:UADMIN", by="terminal:root")
        assert link.startswith("http://127.0.0.1:8750/auth/link/")  # the configured address
        path = link.removeprefix("http://127.0.0.1:8750")
        _context, page = await new_page(browser)
        await page.goto(console.url + path)
        await page.click("button:text-is('Sign in')")
        await page.wait_for_url(console.url + "/")
        entries = await sqlite_store.audit_entries(limit=5)
        assert [(e.action, e.actor) for e in entries] == [
            ("console.sign_in", "slack:UADMIN"),
            ("console.link", "terminal:root"),
        ]
        _other, again = await new_page(browser)
        await again.goto(console.url + path)
        await again.click("button:text-is('Sign in')")
        await again.wait_for_selector("text=used already or has expired")


@pytest.mark.parametrize(
    ("public_url", "secure"), [("", False), ("https://teammate.example.com", True)]
)
async def test_the_session_cookie_is_http_only_same_site_and_secure_behind_https(
    tmp_path: Path,
    sqlite_store: Any,
    start_console: StartConsole,
    public_url: str,
    secure: bool,
) -> None:
    console_section: dict[str, Any] = {"public_url": public_url} if public_url else {}
    settings = console_settings(
        tmp_path, slack=SlackSettings(admins=["UADMIN"]), console=console_section
    )
    async with start_console(settings, sqlite_store) as console:
        link = await create_link(console.deps, "slack:UADMIN", by="terminal:root")
        token = link.rsplit("/", 1)[1]
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                console.url + "/auth/link",
                data={"token": token},
                headers={"Origin": console.url},
                allow_redirects=False,
            ) as response,
        ):
            assert response.status == 303
            [cookie] = [
                c
                for c in response.headers.getall("Set-Cookie")
                if c.startswith("teammate_console=")
            ]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path"} <= attributes
    assert "samesite=lax" in cookie.lower()
    assert ("secure" in attributes) is secure
