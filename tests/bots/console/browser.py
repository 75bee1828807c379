"""A real browser for the console's tests: Debian's Chromium driven by Playwright.

Owns: `launch` (Chromium from the distribution — never `playwright install`, which downloads —
with `--no-sandbox` as root and background networking off, so it reaches nothing but the
console on 127.0.0.1), the skip rule (no Chromium here and not in CI: skipped, saying why;
under CI a missing browser fails), `shoot` (a screenshot kept under `test-artifacts/console/`,
gitignored) and `signed_in` (a session cookie for a person, for tests about a page rather than
about signing in).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bots.console.service import ConsoleService
from bots.console.sessions import SESSION_COOKIE, Role

CHROMIUM = "/usr/bin/chromium"  # Debian's package (scripts/setup installs it)
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "console"
CHROMIUM_FLAGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
]
PAGE_TIMEOUT_MS = 30_000  # a loaded machine: generous, and only a bound


def chromium_or_skip() -> str:
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"no Chromium at {CHROMIUM} in CI (scripts/setup installs it)")
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; scripts/setup does)")


@asynccontextmanager
async def launch() -> AsyncIterator[Any]:
    """A browser; closed (its processes ended) on exit."""
    executable = chromium_or_skip()
    from playwright.async_api import async_playwright

    args = [*CHROMIUM_FLAGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=args)
        try:
            yield browser
        finally:
            await browser.close()


async def new_page(browser: Any) -> tuple[Any, Any]:
    """A fresh context (its own cookies) and a page in it; every console response's CSP
    violations and script errors are collected on `page.problems`."""
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.problems = problems
    return context, page


async def shoot(page: Any, name: str) -> Path:
    """Keep a screenshot of the whole page as a test artifact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{re.sub(r'[^a-z0-9_-]+', '-', name.lower())}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def signed_in(
    context: Any, console: ConsoleService, person: str, role: Role, name: str = ""
) -> None:
    """Give the browser a session for `person` (as signing in would)."""
    deps = console.deps
    _session, cookie = deps.sessions.new(person, name or person, role, now=deps.clock())
    await context.add_cookies(
        [{"name": SESSION_COOKIE, "value": cookie, "url": console.url, "httpOnly": True}]
    )
