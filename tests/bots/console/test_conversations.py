"""The Conversations and conversation pages in a real browser, over runs made by the real
runner (its trace recorder writing what the page shows): a message holding `<script>` is
shown inert, a run with a tool call shows its trace, the search finds a message, the filters
narrow the list, and a direct message's text stays hidden unless the setting says otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from bots.console.conversations_view import HIDDEN, read_filter, thread_lines, thread_link
from bots.prompt import attributed_text
from bots.runner import ConversationRunner
from bots.settings import SlackSettings
from core.messages import Author, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.records import StoredMessage
from tests.bots.console.browser import new_page, shoot, signed_in
from tests.bots.console.conftest import StartConsole, console_settings
from tests.bots.console.test_traces import EchoTool
from tests.bots.runner_helpers import incoming
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces

ADMIN = "slack:UADMIN"
CHANNEL, DM = "slack:T1:C1", "slack:T1:D9"
KEY, OTHER, DM_KEY = f"{CHANNEL}:1700000000.000100", f"{CHANNEL}:1700000001.000100", f"{DM}:1.0"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def settings_for(tmp_path: Path, **console: Any) -> Any:
    return console_settings(
        tmp_path, slack=SlackSettings(admins=["UADMIN"]), console={"viewers": [], **console}
    )


async def answered(store: Any, settings: Any, *asks: tuple[str, str, str]) -> None:
    """Each (key, channel, text) answered by a real run: a tool call, then a reply."""
    model = ScriptedModel(default=Reply(text="ok"))
    for _key, _channel, text in asks:
        model.add(Reply(tool_calls=[call("echo", {"text": f"about {text[:10]}"})]))
        model.add(Reply(text=f"Answer to: {text}"))
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [EchoTool()],
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
    )
    for key, channel, text in asks:
        await runner.submit(incoming(text, key=key, channel=channel), RecordingSurface())
        await runner.wait(key)
    await runner.close()  # every trace event written


def page_url(console: Any, key: str) -> str:
    return f"{console.url}/conversations/{quote(key, safe='')}"


async def test_a_conversation_shows_its_thread_inert_and_its_runs_trace(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path)
    await answered(sqlite_store, settings, (KEY, CHANNEL, f"what is {HOSTILE}?"))
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        response = await page.goto(page_url(console, KEY))
        assert response is not None and response.status == 200
        main = await page.inner_text("main")
        assert HOSTILE in main and await page.evaluate("window.__pwned") is None
        # What the person wrote, once: the stamp the model reads is the author line above it.
        assert await page.inner_text("li.said .text") == f"what is {HOSTILE}?"
        # The trace: the model calls with their tokens and stop reasons, the tool call with
        # its label, its arguments and result behind a disclosure, the answer's timings.
        assert "Model call (turn 1)" in main and "stop reason: tool_use" in main
        assert "Tool: Echo about what" in main
        await page.click("summary:text-is('arguments')")
        await page.wait_for_selector("pre:has-text('about what')")
        await page.click("summary:text-is('result')")
        await page.wait_for_selector("pre:has-text('echoed: about what')")
        assert "first visible post after" in main and "Answer shown" in main
        assert (
            await page.get_attribute("a:text-is('Open the thread')", "href")
        ) == "https://app.slack.com/client/T1/C1/thread/C1-1700000000.000100"
        await shoot(page, "conversation")
        assert page.problems == []


async def test_the_search_finds_a_message_and_the_filters_narrow_the_list(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path)
    await answered(
        sqlite_store,
        settings,
        (KEY, CHANNEL, "where are the penguin invoices?"),
        (OTHER, CHANNEL, "unrelated question"),
    )
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        await page.goto(console.url + "/conversations")
        await page.fill("#q", "penguin")
        await page.click("button:text-is('Show')")
        await page.wait_for_selector("text=Messages matching")
        hits = await page.inner_text("ul.hits")
        assert "where are the penguin invoices?" in hits and "unrelated" not in hits
        rows = await page.locator("tbody tr").all_inner_texts()
        assert len(rows) == 1 and KEY in rows[0]
        await shoot(page, "conversations-search")
        # Hostile query syntax is searched as text, never an error.
        response = await page.goto(console.url + "/conversations?q=%22*)(+OR+NEAR(")
        assert response is not None and response.status == 200
        await page.goto(console.url + "/conversations?platform=discord")
        assert "No conversation matches." in await page.inner_text("tbody")
        await page.goto(console.url + "/conversations?outcome=done&channel=" + quote(CHANNEL))
        assert len(await page.locator("tbody tr").all()) == 2
        await shoot(page, "conversations")
        assert page.problems == []


async def test_a_direct_message_s_text_is_hidden_unless_allowed(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path)
    await answered(sqlite_store, settings, (DM_KEY, DM, "my private salary question"))
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        await page.goto(page_url(console, DM_KEY))
        main = await page.inner_text("main")
        assert "salary" not in main and HIDDEN in main
        assert "Model call (turn 1)" in main  # counts and timings are still shown
        await page.goto(console.url + "/conversations?q=salary")
        assert "salary" not in await page.inner_text("ul.hits")
    async with start_console(settings_for(tmp_path, show_direct_messages=True), sqlite_store) as c:
        context, page = await new_page(browser)
        await signed_in(context, c, ADMIN, "admin", "Ada")
        await page.goto(page_url(c, DM_KEY))
        assert "my private salary question" in await page.inner_text("main")


def test_filters_from_a_hostile_query_string_are_bounded_or_left_out() -> None:
    wanted = read_filter(
        {
            "platform": "sl'ack",
            "outcome": "drop",
            "feedback": "meh",
            "since": "2026-13-45",
            "q": "x" * 10_000,
            "until": "2026-01-02",
        }
    )
    assert wanted.platform is None and wanted.outcome is None and wanted.feedback is None
    assert wanted.since is None and wanted.search is not None and len(wanted.search) == 300
    assert wanted.until == 1767398400.0  # the end of the day named (UTC)
    assert thread_link("discord:dm:42") == "https://discord.com/channels/@me/42"
    assert thread_link("slack:T1:C1:1.0/../x") is None and thread_link("terminal:x") is None


def test_a_person_s_line_leaves_out_the_model_s_header_and_nothing_they_wrote() -> None:
    ada = Author(id="U1", name="Ada")
    said = [
        attributed_text(ada, 1_700_000_000, "hello\nsecond line"),
        "[Ada (U1) · looks like a header but is all they wrote]",  # no line after it
        "[Bob (U2) · 2023-11-14 22:13 UTC]\nquoting Bob",  # someone else's stamp, quoted
    ]
    lines = thread_lines(
        [
            StoredMessage(n, UserMessage(content=text, author=ada, timestamp=1_700_000_000))
            for n, text in enumerate(said, 1)
        ],
        hide_text=False,
    )
    assert [(line.who, line.text) for line in lines] == [
        ("Ada", "hello\nsecond line"),
        ("Ada", said[1]),
        ("Ada", said[2]),
    ]
