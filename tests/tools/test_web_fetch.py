"""web_fetch: readable text, limits, and SSRF refusals checked before any connection.

Only 127.0.0.1 is ever contacted. Names are resolved by an injected fake resolver, and requests
to "public" addresses go to an in-memory httpx transport, never to the network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.content import html_to_markdown
from tools.web_fetch import WebFetchParams, WebFetchTool

PAGE = """<!doctype html><html><head><title>Release notes</title>
<style>body { color: red }</style><script>alert('x')</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<h1>Version 2</h1><p>Now with <strong>faster</strong> search. See
<a href="https://example.org/docs">the docs</a>.</p><ul><li>one</li><li>two</li></ul>
<script>tracking()</script></body></html>"""


@dataclass
class FakeDns:
    table: dict[str, list[str]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return self.table[host]


class Recorder:
    """An in-memory transport: what would have been sent, and a canned page."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self) -> httpx.AsyncBaseTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, headers={"content-type": "text/html; charset=utf-8"}, text=PAGE)


@dataclass
class Server:
    port: int
    hits: list[tuple[str, str]]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


async def _start(routes: web.RouteTableDef) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    hits: list[tuple[str, str]] = []
    routes = web.RouteTableDef()
    other: dict[str, int] = {}

    @web.middleware
    async def record(request: web.Request, handler: object) -> web.StreamResponse:
        hits.append((request.path, request.headers.get("Host", "")))
        return await handler(request)  # type: ignore[operator,no-any-return]

    @routes.get("/page")
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    @routes.get("/text")
    async def text(_: web.Request) -> web.Response:
        return web.Response(text="plain words\n", content_type="text/plain")

    @routes.get("/big")
    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/plain"})
        await response.prepare(request)
        for _ in range(100):  # 6.4 MB if nobody stops reading
            await response.write(b"0123456789abcdef" * 4096)
        return response

    @routes.get("/slow")
    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.Response(text="late")

    @routes.get("/image")
    async def image(_: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n....", content_type="image/png")

    @routes.get("/missing")
    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404, text="no such page", content_type="text/plain")

    @routes.get("/to-private")
    async def to_private(_: web.Request) -> web.Response:
        raise web.HTTPFound("http://10.0.0.1/admin")

    @routes.get("/to-metadata")
    async def to_metadata(_: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    @routes.get("/to-other-port")
    async def to_other_port(_: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{other['port']}/page")

    @routes.get("/to-page")
    async def to_page(_: web.Request) -> web.Response:
        raise web.HTTPFound("/page")

    @routes.get("/loop")
    async def loop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application(middlewares=[record])
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    second_routes = web.RouteTableDef()

    @second_routes.get("/page")
    async def second(_: web.Request) -> web.Response:
        hits.append(("second", ""))
        return web.Response(text="second server")

    second_runner, other["port"] = await _start(second_routes)
    try:
        yield Server(port, hits)
    finally:
        await runner.cleanup()
        await second_runner.cleanup()


async def fetch(tool: WebFetchTool, url: str) -> str:
    return text_of(await tool.execute("c", WebFetchParams(url=url), make_ctx(Path("."))))


# -- refused before any connection ---------------------------------------------------------

FORBIDDEN = [
    "http://127.0.0.1/",
    "http://127.8.9.10:8080/",
    "http://localhost/",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fd00:ec2::254]/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[2002:7f00:1::]/",  # 6to4 around 127.0.0.1
    "http://[64:ff9b::a00:1]/",  # NAT64 around 10.0.0.1
    "http://2130706433/",  # 127.0.0.1 in decimal
    "http://0177.0.0.1/",  # octal
    "http://0x7f.0.0.1/",  # hex
    "http://127.1/",  # short form
    "http://017700000001/",
    "https://169.254.169.254./",
    "http://evil.example/",  # resolves to a private address
    "http://mixed.example/",  # one public and one private address
    "http://rebind.example:8080/",  # resolves to loopback
    "file:///etc/passwd",
    "ftp://example.org/file",
    "gopher://127.0.0.1:70/",
    "javascript:alert(1)",
    "http://user:pass@example.org/",
    "http:///nohost",
]


@pytest.mark.parametrize("url", FORBIDDEN)
async def test_forbidden_targets_are_refused_without_connecting(url: str) -> None:
    dns = FakeDns(
        {
            "localhost": ["127.0.0.1", "::1"],
            "evil.example": ["10.0.0.1"],
            "mixed.example": ["93.184.216.34", "192.168.0.10"],
            "rebind.example": ["127.0.0.1"],
            "example.org": ["93.184.216.34"],
        }
    )
    recorder = Recorder()
    tool = WebFetchTool(resolver=dns, transport_factory=recorder)
    with pytest.raises(ToolError) as caught:
        await fetch(tool, url)
    assert caught.value.message.startswith("Refused"), caught.value.message
    assert recorder.requests == []


async def test_public_name_is_fetched_from_the_checked_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dns = FakeDns({"news.example": ["93.184.216.34"]})
    recorder = Recorder()
    tool = WebFetchTool(resolver=dns, transport_factory=recorder)
    text = await fetch(tool, "https://news.example/notes?id=1")
    (request,) = recorder.requests
    assert request.url.host == "93.184.216.34" and request.url.path == "/notes"
    assert request.headers["host"] == "news.example"
    assert request.extensions["sni_hostname"] == "news.example"
    assert dns.asked == ["news.example"]  # resolved once, then pinned
    assert text.startswith("URL: https://news.example/notes?id=1\nStatus: 200")


def test_html_becomes_readable_markdown() -> None:
    text = html_to_markdown(PAGE)
    assert text.startswith("# Release notes")
    assert "# Version 2" in text
    assert "**faster**" in text and "[the docs](https://example.org/docs)" in text
    assert "- one" in text
    for gone in ("alert", "tracking", "color: red", "About"):
        assert gone not in text


# -- a real local server -------------------------------------------------------------------


async def test_local_server_is_refused_by_default(server: Server) -> None:
    with pytest.raises(ToolError, match="loopback"):
        await fetch(WebFetchTool(), server.url("/page"))
    assert server.hits == []


async def test_allow_list_opens_exactly_that_host_and_port(server: Server) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"])
    text = await fetch(tool, server.url("/page"))
    assert "# Version 2" in text and "alert" not in text
    assert await fetch(tool, server.url("/text")) == (
        f"URL: {server.url('/text')}\nStatus: 200\nContent-Type: text/plain\n\nplain words\n"
    )
    with pytest.raises(ToolError, match="loopback"):
        await fetch(tool, f"http://127.0.0.1:{server.port + 1}/page")
    with pytest.raises(ToolError, match="Refused"):  # the same server by another name
        await fetch(tool, f"http://localhost:{server.port}/page")


async def test_allowed_name_connects_to_its_checked_address(server: Server) -> None:
    dns = FakeDns({"wiki.internal": ["127.0.0.1"]})
    tool = WebFetchTool(allow_hosts=[f"wiki.internal:{server.port}"], resolver=dns)
    assert "plain words" in await fetch(tool, f"http://wiki.internal:{server.port}/text")
    assert server.hits == [("/text", f"wiki.internal:{server.port}")]


@pytest.mark.parametrize("path", ["/to-private", "/to-metadata", "/to-other-port"])
async def test_redirects_are_checked_at_every_hop(server: Server, path: str) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"])
    with pytest.raises(ToolError, match="Refused"):
        await fetch(tool, server.url(path))
    assert ("second", "") not in server.hits


async def test_allowed_redirects_are_followed_up_to_the_limit(server: Server) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"], max_redirects=5)
    assert "# Version 2" in await fetch(tool, server.url("/to-page"))
    with pytest.raises(ToolError, match="Too many redirects"):
        await fetch(tool, server.url("/loop"))
    assert len([hit for hit in server.hits if hit[0] == "/loop"]) == 6


async def test_size_limit_stops_the_download(server: Server) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"], max_bytes=100_000)
    result = await tool.execute("c", WebFetchParams(url=server.url("/big")), make_ctx(Path(".")))
    assert result.details["bytes"] == 100_000 and result.details["download_cut"] is True
    text = text_of(result)
    assert "download was stopped at 97.7 KB" in text and len(text.encode()) < 60 * 1024


async def test_time_limit(server: Server) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"], timeout_s=0.3)
    with pytest.raises(ToolError, match=r"longer than 0\.3 s"):
        await fetch(tool, server.url("/slow"))


async def test_non_text_and_http_errors(server: Server) -> None:
    tool = WebFetchTool(allow_hosts=[f"127.0.0.1:{server.port}"])
    with pytest.raises(ToolError, match="image/png"):
        await fetch(tool, server.url("/image"))
    with pytest.raises(ToolError, match="HTTP 404") as caught:
        await fetch(tool, server.url("/missing"))
    assert "no such page" in caught.value.message


def test_summary() -> None:
    assert WebFetchTool().summarize(WebFetchParams(url="https://a.b/c")) == "Fetch https://a.b/c"
