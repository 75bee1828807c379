"""web_fetch: the smaller refusals: deprecated site-local IPv6 and charsets nobody can decode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from core.tools import ToolError
from tests.fakes.local_site import local_site
from tests.tools.conftest import make_ctx, text_of
from tools.web_fetch import WebFetchParams, WebFetchTool


@pytest.mark.parametrize("url", ["http://[fec0::1]/", "http://[feff:ffff::1]:8080/x"])
async def test_site_local_ipv6_is_refused(url: str) -> None:
    with pytest.raises(ToolError, match=r"Refused.*site-local"):
        await WebFetchTool().execute("c", WebFetchParams(url=url), make_ctx(Path()))


async def test_site_local_ipv6_from_a_name_is_refused() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["fec0:0:0:1::5"]

    tool = WebFetchTool(resolver=resolver)
    with pytest.raises(ToolError, match=r"Refused.*site-local"):
        await tool.execute("c", WebFetchParams(url="http://intranet.example/"), make_ctx(Path()))


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        kind, charset = request.match_info["kind"], request.match_info["charset"]
        body = "<p>caf\u00e9</p>" if kind == "html" else "caf\u00e9"
        return web.Response(
            body=body.encode("latin-1"),
            headers={"Content-Type": f"text/{kind}; charset={charset}"},
        )

    app = web.Application()
    app.router.add_get("/{kind}/{charset}", handler)
    async with local_site(app) as url:
        yield url


@pytest.mark.parametrize("kind", ["plain", "html"])
@pytest.mark.parametrize("charset", ["x-no-such-charset", "utf8mb4"])
async def test_unknown_charset_is_a_clear_error(base_url: str, kind: str, charset: str) -> None:
    tool = WebFetchTool(allow_hosts=[base_url.removeprefix("http://")])
    with pytest.raises(ToolError, match=f"unknown character set '{charset}'"):
        await tool.execute(
            "c", WebFetchParams(url=f"{base_url}/{kind}/{charset}"), make_ctx(Path())
        )


@pytest.mark.parametrize("kind", ["plain", "html"])
async def test_known_charset_is_used(base_url: str, kind: str) -> None:
    tool = WebFetchTool(allow_hosts=[base_url.removeprefix("http://")])
    result = await tool.execute(
        "c", WebFetchParams(url=f"{base_url}/{kind}/latin-1"), make_ctx(Path())
    )
    assert text_of(result).endswith("caf\u00e9")


# Python codecs that are not character sets of documents: punycode decodes in quadratic time
# (100 KB took 6 s on the event loop); the others transform rather than decode text.
@pytest.mark.parametrize("kind", ["plain", "html"])
@pytest.mark.parametrize(
    "charset", ["punycode", "idna", "unicode_escape", "undefined", "zlib", "rot13"]
)
async def test_codecs_that_are_not_document_charsets_are_refused(
    base_url: str, kind: str, charset: str
) -> None:
    tool = WebFetchTool(allow_hosts=[base_url.removeprefix("http://")])
    with pytest.raises(ToolError, match=f"character set '{charset}', which is not one"):
        await tool.execute(
            "c", WebFetchParams(url=f"{base_url}/{kind}/{charset}"), make_ctx(Path())
        )
