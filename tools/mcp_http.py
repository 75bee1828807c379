"""The HTTP client for streamable-HTTP MCP servers, with every JSON response bounded.

Owns: `bounded_http_client`, the `httpx2.AsyncClient` the SDK's `streamable_http_client` uses:
the configured headers, MCP's timeouts, and a transport that stops reading a JSON response past
`max_bytes` (the SDK bounds each SSE event itself, `max_sse_event_size`, but reads a JSON body
whole). A server is output we do not trust.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class ResponseTooLarge(httpx2.TransportError):
    """A server's JSON response went past the limit; the rest was not read."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int) -> None:
        self._inner = inner
        self._max_bytes = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._max_bytes:
                raise ResponseTooLarge(f"a response over {self._max_bytes // 1024} KiB")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self._max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream"):
            return response  # bounded per event by the SDK; the stream may stay open
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(stream, self._max_bytes),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_http_client(
    headers: dict[str, str], timeout: httpx2.Timeout, max_bytes: int = DEFAULT_MAX_BYTES
) -> httpx2.AsyncClient:
    """As the SDK's `create_mcp_http_client` (no redirects followed by httpx; the SDK follows
    same-origin ones itself), with every non-SSE response bounded."""
    transport = _BoundedTransport(httpx2.AsyncHTTPTransport(), max_bytes)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport)
