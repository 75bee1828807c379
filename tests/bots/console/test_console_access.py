"""The console is usable by keyboard and readable, checked in a real browser: every piece of
text on every page meets WCAG AA contrast against what is really behind it, and a person with
only a keyboard can skip to the content, reach every link, field and button of a page in order,
always see where the focus is, and follow a link."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bots.settings import SlackSettings
from core.messages import Usage
from tests.bots.console.browser import new_page, shoot, signed_in
from tests.bots.console.conftest import StartConsole, console_settings
from tests.bots.console.test_conversations import KEY, answered, page_url

ADMIN = "slack:UADMIN"
CHANNEL = "slack:T1:C1"

# Each visible text node's element whose colour over its real background (ancestors'
# backgrounds composited, alpha included) is under WCAG AA: 4.5:1, or 3:1 for large text
# (24 px, or 18.66 px bold). Text drawn inside a canvas (the chart) is not in the DOM.
LOW_CONTRAST_JS = """
() => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat([1]);
  };
  const luminance = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const backdrop = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    return layers.reverse().reduce((below, top) => over(top, below), [255, 255, 255, 1]);
  };
  const found = [];
  let checked = 0;
  const seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const el = node.parentElement;
    if (!node.textContent.trim() || !el || seen.has(el)) continue;
    seen.add(el);
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    if (style.visibility === 'hidden' || box.width === 0 || box.height === 0) continue;
    if (box.right <= 0 || box.bottom <= 0) continue;  // moved off screen (the skip link)
    const fg = parse(style.color);
    if (!fg) { found.push(`${el.tagName}: unreadable colour ${style.color}`); continue; }
    const bg = backdrop(el);
    const [a, b] = [luminance(over(fg, bg)), luminance(bg)];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (parseInt(style.fontWeight, 10) >= 700 && size >= 18.66);
    checked += 1;
    if (ratio < (large ? 3 : 4.5)) {
      const text = node.textContent.trim().slice(0, 40);
      found.push(`${el.tagName}.${el.className} "${text}": ${ratio.toFixed(2)}`);
    }
  }
  return {checked, found};
}
"""

# What has the focus, and whether a person can see it (an outline at least 2 px wide, or the
# focus ring's box shadow).
FOCUSED_JS = """
() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  const box = el.getBoundingClientRect();
  const ring = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2)
    || style.boxShadow !== 'none';
  return {
    tag: el.tagName.toLowerCase(),
    name: (el.getAttribute('aria-label') || el.textContent || el.name || el.id || '').trim(),
    href: el.getAttribute('href'),
    id: el.id,
    ring,
    onScreen: box.right > 0 && box.bottom > 0 && box.width > 0,
  };
}
"""


async def seeded(store: Any) -> None:
    """A little of everything the pages show: runs with cost and feedback in two channels, a
    failed run, a memory note, a channel prompt."""
    for n, (channel, outcome) in enumerate(
        [(CHANNEL, "done"), ("discord:G1:7", "done"), (CHANNEL, "error")]
    ):
        conversation = await store.get_or_create_conversation(f"{channel}:{n}", channel_key=channel)
        run = await store.start_run(conversation.id, user_id=f"U{n}", model="m")
        await store.record_usage(run.id, Usage(input=100, output=50, cost=0.5))
        await store.finish_run(run.id, outcome)
        await store.set_run_feedback(run.id, "U9", "down" if n else "up")
    await store.add_memory_note(
        CHANNEL, "deploys on Fridays", by="U1", max_notes=30, max_chars=4000
    )
    await store.set_channel_config(CHANNEL, {"system_prompt": "Answer briefly."}, by="U1")


async def test_every_page_s_text_meets_wcag_aa_contrast(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = console_settings(tmp_path, slack=SlackSettings(admins=["UADMIN"]))
    await seeded(sqlite_store)
    await answered(sqlite_store, settings, (KEY, CHANNEL, "what changed?"))  # a tool call
    async with start_console(settings, sqlite_store) as console:
        _anonymous, signin_page = await new_page(browser)
        await signin_page.goto(console.url + "/signin")
        pages = {"/signin": await signin_page.evaluate(LOW_CONTRAST_JS)}
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        for path in [
            "/",
            "/conversations",
            "/feedback",
            "/channels",
            f"/channels/{CHANNEL}",
            "/audit",
            "/health",
        ]:
            response = await page.goto(console.url + path)
            assert response is not None and response.status == 200, path
            pages[path] = await page.evaluate(LOW_CONTRAST_JS)
        # A conversation with its trace, every expandable part open.
        await page.goto(page_url(console, KEY))
        await page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        pages["a conversation"] = await page.evaluate(LOW_CONTRAST_JS)
        assert "echo" in await page.inner_text("main")
        await shoot(page, "contrast-conversation-open")
        # The current page's tab in the dark header, and a notice after a change.
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        await page.fill("#timezone", "Europe/Berlin")
        await page.click("form[action$='/config'] button[type=submit]")
        await page.wait_for_selector(".notice")
        pages["after a change"] = await page.evaluate(LOW_CONTRAST_JS)
        await shoot(page, "contrast-after-change")
    for path, result in pages.items():
        assert result["checked"] >= 5, f"{path}: too little text found to judge ({result})"
        assert result["found"] == [], f"{path}: text under WCAG AA contrast: {result['found']}"


async def test_a_keyboard_alone_skips_to_the_content_reaches_everything_and_follows_a_link(
    tmp_path: Path, sqlite_store: Any, browser: Any, start_console: StartConsole
) -> None:
    settings = console_settings(tmp_path, slack=SlackSettings(admins=["UADMIN"]))
    await seeded(sqlite_store)
    async with start_console(settings, sqlite_store) as console:
        context, page = await new_page(browser)
        await signed_in(context, console, ADMIN, "admin", "Ada")
        await page.goto(f"{console.url}/channels/{CHANNEL}")

        # The first Tab shows the skip link; Enter moves the focus to the page's content.
        await page.keyboard.press("Tab")
        first = await page.evaluate(FOCUSED_JS)
        assert first is not None and first["name"] == "Skip to content", first
        assert first["onScreen"] and first["ring"], first
        await shoot(page, "keyboard-skip-link")
        await page.keyboard.press("Enter")
        await page.wait_for_function(
            "document.activeElement && document.activeElement.id === 'main'"
        )

        # From the top, Tab visits every control of the page, in the page's order, each
        # with a visible focus ring, and comes round again.
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        controls = await page.evaluate(
            """() => [...document.querySelectorAll(
                 'a[href], button, input:not([type=hidden]), textarea, select')]
               .filter((e) => !e.disabled && e.getClientRects().length)
               .map((e) => e.tagName.toLowerCase() + ':' + (e.getAttribute('href') || e.id
                 || e.name || e.textContent.trim()))"""
        )
        visited: list[str] = []
        for _ in range(len(controls) + 5):
            await page.keyboard.press("Tab")
            focused = await page.evaluate(FOCUSED_JS)
            if focused is None:
                break  # past the last control: the focus left the page
            assert focused["ring"], f"no visible focus on {focused}"
            key = f"{focused['tag']}:" + (focused["href"] or focused["id"] or focused["name"])
            if visited and key == visited[0]:
                break
            visited.append(key)
        assert visited == controls, f"Tab order {visited} is not the page's {controls}"
        assert visited[0] == "a:#main"  # the skip link first
        assert "textarea:prompt" in visited and "button:Save" in visited
        assert "a:/health" in visited and "button:Sign out" in visited

        # A link followed with Enter (the console's links are boosted: still a real page).
        await page.goto(f"{console.url}/channels/{CHANNEL}")
        await page.focus("header nav a[href='/health']")
        await page.keyboard.press("Enter")
        await page.wait_for_url(console.url + "/health")
        await page.wait_for_selector("h1:text('Health')")
        current = page.locator("header nav a[aria-current='page']")
        assert await current.get_attribute("href") == "/health"
        assert page.problems == []
