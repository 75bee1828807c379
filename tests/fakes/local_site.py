"""A small aiohttp site on 127.0.0.1 for tests that fetch over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def local_site(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on a free port of 127.0.0.1; yields its base URL ("http://127.0.0.1:N")."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
