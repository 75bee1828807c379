"""HTML → Markdown runs in a child process with a deadline, and deep nesting has an answer.

The event-loop check is a ratio, not a time limit: while a big page converts, a heartbeat task
must keep ticking, with no single gap taking most of the conversion's time (on the loop, the
conversion was one gap as long as itself).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from core.tools import ToolError
from tests.fakes.local_site import local_site
from tests.tools.conftest import make_ctx, text_of
from tools.content import (
    HTML_CONVERT_MAX_BYTES,
    MAX_CONCURRENT_CONVERSIONS,
    convert_html,
    html_to_markdown,
    strip_raw_blocks,
)
from tools.web_fetch import WebFetchParams, WebFetchTool

ROW = "<tr><td>cell <b>bold</b></td><td><a href='/x'>link</a></td></tr>\n"
BIG = ("<html><body><table>" + ROW * (150_000 // len(ROW)) + "</table></body></html>").encode()
DEEP = ("<div>" * 5000 + "deep text" + "</div>" * 5000).encode()
HUGE = (
    "<html><body>" + ("<p>" + "words " * 100 + "</p>\n") * (2 * HTML_CONVERT_MAX_BYTES // 600)
).encode() + b"<p>the very end</p></body></html>"


def worker_children() -> list[int]:
    """Our child processes that are HTML conversion workers (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == os.getpid() and b"_conversion_worker" in cmdline:
            found.append(int(entry))
    return found


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    pages = {"/big": BIG, "/deep": DEEP, "/huge": HUGE}

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=pages[request.path], content_type="text/html")

    app = web.Application()
    app.router.add_get("/{name}", handler)
    async with local_site(app) as url:
        yield url


def tool_for(base_url: str, **options: float) -> WebFetchTool:
    return WebFetchTool(allow_hosts=[base_url.removeprefix("http://")], **options)  # type: ignore[arg-type]


async def test_big_page_converts_while_the_event_loop_keeps_ticking(base_url: str) -> None:
    ticks: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    result = await tool_for(base_url).execute(
        "c", WebFetchParams(url=f"{base_url}/big"), make_ctx(Path())
    )
    ended = time.perf_counter()
    stop.set()
    await beat
    assert "| cell **bold** | [link](/x) |" in text_of(result)
    during = [t for t in ticks if started <= t <= ended]
    gaps = [b - a for a, b in zip([started, *during], [*during, ended], strict=True)]
    assert len(during) >= 10, f"{len(during)} ticks in {ended - started:.2f} s"
    assert max(gaps) < (ended - started) / 2, f"a {max(gaps):.2f} s stall"


async def test_deep_nesting_gives_the_text_and_says_so(base_url: str) -> None:
    assert html_to_markdown(DEEP) == "deep text"  # no RecursionError
    text = text_of(
        await tool_for(base_url).execute(
            "c", WebFetchParams(url=f"{base_url}/deep"), make_ctx(Path())
        )
    )
    assert "deep text" in text
    assert "elements nested over 100 deep are shown as plain text" in text


async def test_only_the_start_of_a_huge_page_is_converted(base_url: str) -> None:
    tool = tool_for(base_url, max_bytes=4 * HTML_CONVERT_MAX_BYTES)
    result = await tool.execute("c", WebFetchParams(url=f"{base_url}/huge"), make_ctx(Path()))
    text = text_of(result)
    assert text.count("words words") > 10 and "the very end" not in text
    assert "only the first 256.0 KB of the page" in text


async def test_a_conversion_past_its_deadline_is_stopped_and_its_process_killed(
    base_url: str,
) -> None:
    tool = tool_for(base_url, convert_timeout_s=0.001)
    with pytest.raises(ToolError, match=r"could not be shown as text: converting .* longer than"):
        await tool.execute("c", WebFetchParams(url=f"{base_url}/big"), make_ctx(Path()))
    assert worker_children() == []


async def test_cancelling_the_caller_kills_the_conversion() -> None:
    task = asyncio.create_task(convert_html(BIG * 4))
    for _ in range(1000):  # the child appears within moments
        if worker_children():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert worker_children() == []


async def test_small_pages_convert_in_the_child_too() -> None:
    converted = await convert_html(b"<title>T</title><p>fine</p>", max_chars=5)
    assert converted.text == "# T\n\nf" and not converted.cut and not converted.flattened


def test_code_blocks_are_stripped_before_the_size_cap() -> None:
    page = b"<p>a</p><SCRIPT type=x>" + b"var x;" * 10 + b"</script ><p>b</p><scripts>k</scripts>"
    assert strip_raw_blocks(page) == b"<p>a</p><p>b</p><scripts>k</scripts>"
    assert strip_raw_blocks(b"<p>a</p><style>unclosed" + b"x" * 100) == b"<p>a</p>"
    assert strip_raw_blocks(b"<svg/><p>c</p>") == b"<p>c</p>"


def test_conversion_stops_once_it_has_enough_text() -> None:
    from tools.content import _convert

    page = ("<table>" + ROW * 600 + "</table>").encode()
    whole = _convert(page, None).text
    enough = _convert(page, None, budget=2_000).text
    assert whole.startswith(enough.rstrip()) and 2_000 < len(enough) < len(whole) / 3


async def test_at_most_two_conversions_run_at_once() -> None:
    page = ("<table>" + ROW * 300 + "</table>").encode()
    tasks = [asyncio.create_task(convert_html(page, max_chars=100)) for _ in range(4)]
    most = 0
    while not all(task.done() for task in tasks):
        most = max(most, len(worker_children()))
        await asyncio.sleep(0.01)
    assert [len((await task).text) for task in tasks] == [101] * 4
    assert 1 <= most <= MAX_CONCURRENT_CONVERSIONS == 2


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


async def test_the_child_gets_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-for-the-test")
    task = asyncio.create_task(convert_html(BIG))
    children: list[int] = []
    for _ in range(1000):
        if children := worker_children():
            break
        await asyncio.sleep(0.01)
    environment = environ_of(children[0])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "ANTHROPIC_API_KEY" not in environment and "PATH" in environment
