"""A PostgreSQL test server reached through a TCP proxy the test controls (to silence,
refuse or black-hole its connections): the proxy, and the server's URL pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

from tests.fakes.tcp_proxy import TcpProxy, proxying


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@127.0.0.1:{port}"))


@asynccontextmanager
async def proxy_to(pg_url: str) -> AsyncIterator[TcpProxy]:
    """A proxy in front of the test database (whose address `through` then points at)."""
    server = urlsplit(pg_url)
    assert server.hostname is not None and server.port is not None
    async with proxying(server.hostname, server.port) as proxy:
        yield proxy
