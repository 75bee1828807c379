"""The Feedback page in a real browser: 👎 first, each with its conversation and its trace; an
admin marks one reviewed with a note (stored, audited as `console.feedback_review`); a viewer
cannot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bots.console.browser import new_page, shoot, signed_in
from tests.bots.console.conftest import StartConsole
from tests.bots.console.test_conversations import CHANNEL, KEY, OTHER, answered, settings_for

ADMIN, VIEWER = "slack:UADMIN", "slack:UVIEW"


async def voted(store: Any, settings: Any) -> tuple[int, int]:
    await answered(store, settings, (KEY, CHANNEL, "first question"), (OTHER, CHANNEL, "second"))
    runs = []
    for key in (KEY, OTHER):
        conversation = await store.get_conversation(key)
        (run,) = await store.conversation_runs(conversation.id, limit=2)
        runs.append(run.id)
    liked, disliked = runs
    await store.set_run_feedback(disliked, "U5", "down")
    await store.set_run_feedback(liked, "U6", "up")  # the newer vote: still after the 👎
    return liked, disliked


async def test_thumbs_down_first_with_trace_and_an_admin_marks_it_reviewed(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path)
    liked, disliked = await voted(sqlite_store, settings)
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        await page.goto(console.url + "/feedback")
        headings = await page.locator("section.feedback h2").all_inner_texts()
        assert f"run {disliked}" in headings[0] and "👎" in headings[0]
        assert f"run {liked}" in headings[1]
        first = page.locator("section.feedback").first
        await first.locator("summary:text-is('Trace')").click()
        assert "Model call (turn 1)" in await first.inner_text()
        assert await first.locator(f"a[href$='#run-{disliked}']").count() == 1
        await page.fill(f"#note-{disliked}", "it misread the question <b>bold</b>")
        await page.click(f"section:has(#note-{disliked}) button:text-is('Mark reviewed')")
        await page.wait_for_selector("text=Marked reviewed.")
        assert "it misread the question <b>bold</b>" in await page.inner_text("main")
        await shoot(page, "feedback")
        assert page.problems == []
    (item,) = await sqlite_store.feedback_items(limit=5, reviewed=True)
    assert item.run_id == disliked and item.review is not None
    assert (item.review.reviewed_by, item.review.note) == (
        ADMIN,
        "it misread the question <b>bold</b>",
    )
    (entry,) = await sqlite_store.audit_entries(limit=5, action="console.feedback_review")
    assert (entry.actor, entry.target) == (ADMIN, str(disliked))
    assert entry.origin.startswith("console ") and entry.detail["note"].startswith("it misread")


async def test_a_viewer_sees_feedback_but_cannot_review(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = settings_for(tmp_path, viewers=[VIEWER])
    _liked, disliked = await voted(sqlite_store, settings)
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, VIEWER, "viewer")
        await page.goto(console.url + "/feedback")
        assert await page.locator("form[action$='/review']").count() == 0
        cookie = (await context.cookies())[0]["value"]
        session = console.deps.sessions.read(cookie, now=console.deps.clock())
        assert session is not None
        response = await page.request.post(
            f"{console.url}/feedback/{disliked}/review",
            form={"csrf": console.deps.sessions.csrf_token(session), "note": "viewer"},
        )
        assert response.status == 403
    assert await sqlite_store.feedback_items(limit=5, reviewed=True) == []
    assert await sqlite_store.audit_entries(limit=5, action="console.feedback_review") == []
