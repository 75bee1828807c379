"""The console's pages in a real browser: each page renders under the strict CSP with no
script error, text people wrote is shown inert, changes need an admin and the page's CSRF
token, and a change made here is stored and audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from bots.settings import ChannelConfig, SlackSettings
from core.messages import Usage
from tests.bots.console.browser import new_page, shoot, signed_in
from tests.bots.console.conftest import StartConsole, console_settings

ADMIN = "slack:UADMIN"
VIEWER = "slack:UVIEW"
CHANNEL = "slack:T1:C1"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def settings_for(tmp_path: Path) -> Any:
    return console_settings(
        tmp_path,
        slack=SlackSettings(admins=["UADMIN"]),
        console={"viewers": [VIEWER]},
    )


async def test_every_page_renders_under_the_csp_without_a_script_error(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path)
    for n, (channel, cost) in enumerate([(CHANNEL, 0.5), ("discord:G1:7", 0.25), (CHANNEL, 1.0)]):
        conversation = await sqlite_store.get_or_create_conversation(
            f"{channel}:{n}", channel_key=channel
        )
        run = await sqlite_store.start_run(conversation.id, user_id=f"U{n}", model="m")
        await sqlite_store.record_usage(run.id, Usage(input=100, output=50, cost=cost))
        await sqlite_store.finish_run(run.id, "done")
        await sqlite_store.set_run_feedback(run.id, "U9", "up" if n else "down")
    await sqlite_store.add_memory_note(CHANNEL, HOSTILE, by="U1", max_notes=30, max_chars=4000)
    await sqlite_store.set_channel_config(CHANNEL, {"system_prompt": HOSTILE}, by="U1")
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        for path, name in [
            ("/", "overview"),
            ("/channels", "channels"),
            (f"/channels/{CHANNEL}", "channel"),
            ("/audit", "audit"),
            ("/health", "health"),
        ]:
            response = await page.goto(console.url + path)
            assert response is not None and response.status == 200, path
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
            await shoot(page, name)
        # The hostile prompt and note are shown as text, and never ran.
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        assert await page.evaluate("window.__pwned") is None
        assert HOSTILE in await page.inner_text("main")
        # The overview's figures, and its chart drawn by the shipped Chart.js (no CDN here).
        await page.goto(console.url + "/")
        await page.wait_for_function("window.Chart && Chart.getChart('cost-chart') !== undefined")
        cards = await page.inner_text(".cards")
        assert "3\nanswers" in cards and "$1.75" in cards and "67%" in cards
        datasets = await page.evaluate(
            "Chart.getChart('cost-chart').data.datasets.map(d => d.label)"
        )
        assert datasets == [CHANNEL, "discord:G1:7"]  # stacked by channel, the costliest first
        await shoot(page, "overview")
        assert page.problems == []


async def test_a_person_who_is_not_signed_in_is_sent_to_sign_in(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    async with start_console(settings_for(tmp_path), sqlite_store) as console:
        _context, page = await new_page(browser)
        await page.goto(console.url + "/health")
        assert page.url.startswith(console.url + "/signin?next=") and "health" in page.url
        assert "teammate console link" in await page.inner_text("main")
        await shoot(page, "signin")


async def test_an_admin_changes_a_channel_s_prompt_and_it_is_stored_and_audited(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    async with start_console(settings_for(tmp_path), sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        await page.fill("#prompt", "Answer in French.")
        await page.click("button:text-is('Save')")
        await page.wait_for_selector("text=Saved.")
        stored = ChannelConfig.from_stored(await sqlite_store.get_channel_config(CHANNEL))
        assert stored.system_prompt == "Answer in French."
        [entry] = await sqlite_store.audit_entries(limit=10, action="config.set")
        assert (entry.actor, entry.target) == (ADMIN, CHANNEL)
        assert entry.origin.startswith("console 127.0.0.1")
        assert entry.detail["change"] == {"prompt": "Answer in French."}
        # A refused change (a tool the file does not allow) says why and stores nothing.
        await page.fill("#tools", "bash")
        await page.click("button:text-is('Save')")
        await page.wait_for_selector(".problem")
        after = ChannelConfig.from_stored(await sqlite_store.get_channel_config(CHANNEL))
        assert after.tools is None


async def test_a_viewer_sees_but_cannot_change(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    async with start_console(settings_for(tmp_path), sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, VIEWER, "viewer")
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        assert await page.locator("#prompt").count() == 0  # no form offered
        # Posting the form anyway, with the viewer's own valid CSRF token: refused.
        token = console.deps.sessions.csrf_token(
            console.deps.sessions.read(
                (await context.cookies())[0]["value"], now=console.deps.clock()
            )
        )
        response = await page.request.post(
            f"{console.url}/channels/{CHANNEL}/config",
            form={"csrf": token, "prompt": "changed by a viewer"},
        )
        assert response.status == 403
        assert await sqlite_store.get_channel_config(CHANNEL) is None


async def test_a_change_without_the_page_s_csrf_token_is_refused(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    async with start_console(settings_for(tmp_path), sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin")
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        # The page's own form, its token replaced by a forged one.
        await page.evaluate(
            "document.querySelector('form[action$=\"/config\"] input[name=csrf]').value = 'forged'"
        )
        await page.fill("#prompt", "forged change")
        await page.click("button:text-is('Save')")
        await page.wait_for_selector("text=not from this console")
        assert await sqlite_store.get_channel_config(CHANNEL) is None
        # From another site: the browser sends the session cookie only on top-level GETs
        # (SameSite=Lax), and the Origin check refuses it even with a token.
        cookie = (await context.cookies())[0]["value"]
        session = console.deps.sessions.read(cookie, now=console.deps.clock())
        assert session is not None
        token = console.deps.sessions.csrf_token(session)
        async with (
            aiohttp.ClientSession(cookies={"teammate_console": cookie}) as http,
            http.post(
                f"{console.url}/channels/{CHANNEL}/config",
                data={"csrf": token, "prompt": "x"},
                headers={"Origin": "http://evil.example"},
            ) as response,
        ):
            assert response.status == 403
        assert await sqlite_store.get_channel_config(CHANNEL) is None


async def test_a_direct_message_s_text_is_hidden_unless_the_setting_shows_it(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    dm = "slack:T1:D0PRIVATE"
    await sqlite_store.add_memory_note(
        dm, "my salary is 100", by="U1", max_notes=30, max_chars=4000
    )
    for show in (False, True):
        settings = settings_for(tmp_path).model_copy(
            update={
                "console": settings_for(tmp_path).console.model_copy(
                    update={"show_direct_messages": show}
                )
            }
        )
        async with start_console(settings, sqlite_store) as console:
            context, page = await new_page(browser)
            await signed_in(context, console, ADMIN, "admin")
            await page.goto(f"{console.url}/channels/{dm}")
            text = await page.inner_text("main")
            assert ("my salary is 100" in text) is show
            assert ("hidden: a direct message" in text) is not show
