"""web_fetch: compressed bodies are decoded by us, layer by layer, and capped as they decode.

A server on 127.0.0.1 sends bodies with hand-made Content-Encoding headers; aiohttp sends the
bytes as given (it only compresses when asked to). Memory is checked with tracemalloc (Python
allocations, deterministic), never with RSS or timings.
"""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from core.tools import ToolError
from tests.fakes.local_site import local_site
from tests.tools.conftest import make_ctx, text_of
from tools.web_fetch import DECODE_CHUNK, BodyDecoder, WebFetchParams, WebFetchTool

BOMB_SIZE = 32 * 1024 * 1024  # what the stacked body inflates to if nobody stops it
LIMIT = 100_000


def gzip_stack(payload: bytes, layers: int) -> bytes:
    for _ in range(layers):
        payload = gzip.compress(payload, compresslevel=9)
    return payload


def raw_deflate(payload: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(payload) + packer.flush()


TEXT = b"line of plain text\n" * 2000
BODIES: dict[str, tuple[str, bytes]] = {
    "/bomb": ("gzip, gzip", gzip_stack(b"\0" * BOMB_SIZE, 2)),
    "/gzip": ("gzip", gzip.compress(TEXT)),
    "/x-gzip": ("x-gzip", gzip.compress(TEXT)),
    "/members": ("gzip", gzip.compress(TEXT[:1000]) + gzip.compress(TEXT[1000:])),
    "/deflate": ("deflate", zlib.compress(TEXT)),
    "/raw-deflate": ("deflate", raw_deflate(TEXT)),
    "/gzip-deflate": ("deflate, gzip", gzip.compress(zlib.compress(TEXT))),
    "/identity": ("identity", TEXT),
    "/brotli": ("br", b"\x1b\x00\x00\x00"),
    "/made-up": ("gzip, snappy9", b"whatever"),
    "/too-many": (", ".join(["gzip"] * 9), gzip_stack(b"deep", 9)),
    "/corrupt": ("gzip", b"\x1f\x8b\x08\x00" + b"\xff" * 64),
}


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        encoding, body = BODIES[request.path]
        return web.Response(
            body=body,
            headers={"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": encoding},
        )

    app = web.Application()
    app.router.add_get("/{name}", handler)
    async with local_site(app) as url:
        yield url


def tool_for(base_url: str, max_bytes: int = LIMIT) -> WebFetchTool:
    return WebFetchTool(allow_hosts=[base_url.removeprefix("http://")], max_bytes=max_bytes)


async def test_stacked_gzip_is_cut_while_it_inflates(base_url: str) -> None:
    tool = tool_for(base_url)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        result = await tool.execute("c", WebFetchParams(url=f"{base_url}/bomb"), make_ctx(Path()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.details["bytes"] == LIMIT and result.details["download_cut"] is True
    assert "download was stopped" in text_of(result)
    # The whole body would be 32 MB; only the cap and a few chunks in flight may ever exist.
    assert peak - before < LIMIT * 4 + 40 * DECODE_CHUNK, f"peak {peak - before} bytes"


def test_decoder_never_holds_more_than_a_chunk_beyond_the_limit() -> None:
    bomb = BODIES["/bomb"][1]
    decoder = BodyDecoder("gzip, gzip", limit=LIMIT)
    decoded = 0
    for start in range(0, len(bomb), 1024):
        for piece in decoder.feed(bomb[start : start + 1024]):
            assert len(piece) <= DECODE_CHUNK
            decoded += len(piece)
        assert decoded <= LIMIT + DECODE_CHUNK
    for piece in decoder.finish():
        decoded += len(piece)
    assert decoded <= LIMIT + DECODE_CHUNK and decoder.cut


def test_decoder_stops_intermediate_layers_too() -> None:
    """An inner layer of endless empty gzip members produces nothing at the outer end; its
    work is still bounded by the limit, not by the 8 MB it would expand to."""
    empties = gzip.compress(b"") * (8 * 1024 * 1024 // 20)
    decoder = BodyDecoder("gzip, gzip", limit=LIMIT)
    outer = gzip.compress(empties)
    assert list(decoder.feed(outer)) + list(decoder.finish()) == []
    assert decoder.cut


@pytest.mark.parametrize(
    "path",
    ["/gzip", "/x-gzip", "/members", "/deflate", "/raw-deflate", "/gzip-deflate", "/identity"],
)
async def test_supported_encodings_decode_to_the_text(base_url: str, path: str) -> None:
    tool = tool_for(base_url, max_bytes=1_000_000)
    result = await tool.execute("c", WebFetchParams(url=base_url + path), make_ctx(Path()))
    assert result.details["bytes"] == len(TEXT) and not result.details["download_cut"]
    assert text_of(result).endswith("line of plain text\n" * 3)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/brotli", "Content-Encoding 'br'"),
        ("/made-up", "Content-Encoding 'snappy9'"),
        ("/too-many", "more than 4"),
        ("/corrupt", "could not be decoded"),
    ],
)
async def test_undecodable_bodies_give_a_clear_error(
    base_url: str, path: str, message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        await tool_for(base_url).execute("c", WebFetchParams(url=base_url + path), make_ctx(Path()))


async def test_only_decodable_encodings_are_asked_for(base_url: str) -> None:
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept-Encoding", ""))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await tool_for(f"http://127.0.0.1:{port}").execute(
            "c", WebFetchParams(url=f"http://127.0.0.1:{port}/"), make_ctx(Path())
        )
    finally:
        await runner.cleanup()
    assert seen == ["gzip, deflate"]


@pytest.mark.parametrize("step", [1, 7, 20, 4096])
def test_gzip_members_and_trailing_bytes_in_any_chunking(step: int) -> None:
    first, second = gzip.compress(b"first part, "), gzip.compress(b"second part")
    for body, expected in [
        (first + second, b"first part, second part"),
        (first + b"\0\0\0\0", b"first part, "),  # padding after the stream
        (first + b"trailing junk", b"first part, "),  # not a gzip member: ignored
    ]:
        decoder = BodyDecoder("gzip", limit=LIMIT)
        out = b""
        for start in range(0, len(body), step):
            out += b"".join(decoder.feed(body[start : start + step]))
        out += b"".join(decoder.finish())
        assert out == expected and not decoder.cut
