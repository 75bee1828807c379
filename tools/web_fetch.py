"""The web_fetch tool: GET one http(s) URL and return it as readable text.

Owns: `WebFetchTool`: the fetch itself (pinned connections, redirects by hand, the body read
within its cap) and how its result is worded. The address checks (`check_url`,
`is_forbidden_address`, `AddressPolicy`) are `tools.web_address`'s and body decoding
(`BodyDecoder`) is `tools.web_body`'s; both are re-exported here. HTML → Markdown is
`tools.content`'s, run in a child process with a deadline (`convert_html`) so a big or deeply
nested page never runs on the event loop.

SSRF rules:
- Only http and https; no credentials in the URL.
- Before any connection the host is resolved (IP literals, including the legacy decimal, octal
  and hex IPv4 forms, are parsed here, not by a resolver) and EVERY address is checked:
  loopback, private, link-local, cloud metadata, unspecified, multicast, reserved, CGNAT
  (100.64/10), IPv6 site-local (fec0::/10) and the IPv4 addresses embedded in IPv6 (mapped,
  6to4, Teredo, NAT64) are refused unless configuration allows the host (`host` or
  `host:port`).
- The connection goes to the address that was checked (the URL is rewritten to the IP, with the
  original Host header and TLS server name), so a second DNS answer cannot redirect it
  (DNS rebinding). Proxies from the environment are ignored for the same reason.
- Redirects are followed by hand, at most `max_redirects`, each hop checked like the first.
- The body is streamed and cut at `max_bytes`; the whole fetch is bounded by `timeout_s`.
  Compressed bodies are decoded here, not by httpx (`BodyDecoder`): every layer of
  `Content-Encoding` is inflated in bounded pieces and counted as it inflates, so a small
  stacked gzip cannot expand to gigabytes before the cap is checked.

Must not: import anything of ours outside `core` and `tools.web_*`, `tools.content`,
`tools.truncation`.
"""

from __future__ import annotations

import asyncio
import codecs
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

# httpx imports its transport stack (httpcore, h11, anyio's asyncio backend) on first use;
# importing it here keeps that one-off cost (hundreds of ms) off the event loop's first fetch.
import anyio._backends._asyncio  # noqa: F401
import httpcore._backends.anyio  # noqa: F401
import httpx
from pydantic import BaseModel, ConfigDict, Field

from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from tools.content import (
    HTML_CONVERT_MAX_BYTES,
    HTML_CONVERT_TIMEOUT_S,
    HTML_MAX_DEPTH,
    ConversionError,
    convert_html,
)
from tools.truncation import DEFAULT_MAX_BYTES, format_size, truncate_head
from tools.web_address import (
    AddressPolicy,
    FetchTarget,
    IPAddress,
    Resolver,
    check_url,
    is_forbidden_address,
    parse_ip_literal,
    system_resolver,
)
from tools.web_body import (
    ACCEPT_ENCODING,
    DECODE_CHUNK,
    MAX_ENCODING_LAYERS,
    BodyDecoder,
    DecodeError,
)

__all__ = [
    "ACCEPT_ENCODING",
    "DECODE_CHUNK",
    "MAX_ENCODING_LAYERS",
    "REDIRECT_CODES",
    "USER_AGENT",
    "AddressPolicy",
    "BodyDecoder",
    "DecodeError",
    "IPAddress",
    "Resolver",
    "TransportFactory",
    "WebFetchParams",
    "WebFetchTool",
    "is_forbidden_address",
    "parse_ip_literal",
    "system_resolver",
]

TransportFactory = Callable[[], httpx.AsyncBaseTransport]

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Teammate/0.1 (web_fetch; +https://github.com/)"

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_HTML_TYPES = ("text/html", "application/xhtml+xml")
# Python text codecs that are transforms, not character sets (by their canonical names).
_NOT_DOCUMENT_CHARSETS = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "undefined", "charmap"}
)


class WebFetchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The http:// or https:// URL to fetch.")


class WebFetchTool(AgentTool[WebFetchParams]):
    name: ClassVar[str] = "web_fetch"
    label: ClassVar[str] = "Fetch"
    description: ClassVar[str] = (
        "Fetch one web page or text resource over http(s) with a GET request and return it as "
        "readable text: HTML is converted to Markdown (scripts, styles and navigation removed); "
        "JSON, XML and plain text are returned as they are. Other content types (images, PDFs, "
        f"binaries) are refused. At most {DEFAULT_MAX_BYTES // 1024} KB of text is returned. "
        "Private, internal and local network addresses are refused. It cannot log in, submit "
        "forms or run JavaScript."
    )
    parameters: ClassVar[type[BaseModel]] = WebFetchParams
    timeout_s: ClassVar[float] = 60.0

    def __init__(
        self,
        *,
        allow_hosts: Sequence[str] = (),
        max_bytes: int = 2 * 1024 * 1024,
        max_chars: int = DEFAULT_MAX_BYTES,
        timeout_s: float = 20.0,
        max_redirects: int = 5,
        convert_timeout_s: float = HTML_CONVERT_TIMEOUT_S,
        resolver: Resolver = system_resolver,
        transport_factory: TransportFactory | None = None,
    ) -> None:
        self.policy = AddressPolicy(tuple(allow_hosts))
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self.fetch_timeout_s = timeout_s
        self.max_redirects = max_redirects
        self.convert_timeout_s = convert_timeout_s
        self.resolver = resolver
        self.transport_factory = transport_factory

    def summarize(self, params: WebFetchParams) -> str:
        return f"Fetch {params.url}"

    async def execute(self, call_id: str, params: WebFetchParams, ctx: ToolContext) -> ToolResult:
        try:
            async with asyncio.timeout(self.fetch_timeout_s):
                return await self._fetch(params.url)
        except TimeoutError:
            raise ToolError(
                f"Fetching {params.url} took longer than {self.fetch_timeout_s:g} s and was "
                "stopped."
            ) from None

    # -- checking --------------------------------------------------------------------------

    async def check_url(self, raw: str | httpx.URL) -> FetchTarget:
        """Parse, resolve and check a URL; raise ToolError if it may not be fetched. No
        connection is made here (`tools.web_address.check_url`)."""
        return await check_url(raw, self.policy, self.resolver)

    # -- fetching --------------------------------------------------------------------------

    async def _fetch(self, raw_url: str) -> ToolResult:
        transport = self.transport_factory() if self.transport_factory else None
        timeout = httpx.Timeout(self.fetch_timeout_s, connect=min(10.0, self.fetch_timeout_s))
        async with httpx.AsyncClient(
            transport=transport,
            verify=await _tls_context(),
            trust_env=False,
            follow_redirects=False,
            timeout=timeout,
        ) as client:
            url: str | httpx.URL = raw_url
            hops: list[str] = []
            for _ in range(self.max_redirects + 1):
                target = await self.check_url(url)
                response = await self._send(client, target)
                try:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_CODES and location:
                        hops.append(str(target.url))
                        try:
                            url = target.url.join(location)
                        except httpx.InvalidURL as exc:
                            raise ToolError(f"Refused: bad redirect location ({exc}).") from None
                        continue
                    body, cut = await self._read_body(response)
                    return await self._render(target.url, response, body, cut, hops)
                finally:
                    await response.aclose()
            raise ToolError(f"Too many redirects (more than {self.max_redirects}) from {raw_url}.")

    async def _send(self, client: httpx.AsyncClient, target: FetchTarget) -> httpx.Response:
        """GET the target from one of its checked addresses (pinned: no second lookup)."""
        default_port = 443 if target.url.scheme == "https" else 80
        name = f"[{target.host}]" if ":" in target.host else target.host
        host_header = name if target.port == default_port else f"{name}:{target.port}"
        last_error: Exception | None = None
        for address in target.addresses:
            request = client.build_request(
                "GET",
                target.url.copy_with(host=address),
                headers={
                    "Host": host_header,
                    "User-Agent": USER_AGENT,
                    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
                    "Accept-Encoding": ACCEPT_ENCODING,
                },
                extensions={"sni_hostname": target.host},
            )
            try:
                return await client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last_error = exc
            except httpx.HTTPError as exc:
                raise ToolError(f"Fetching {target.url} failed: {_describe(exc)}.") from None
        raise ToolError(f"Could not connect to {target.host}: {_describe(last_error)}.")

    async def _read_body(self, response: httpx.Response) -> tuple[bytes, bool]:
        """The decoded body, cut at max_bytes, and whether it was cut. Raw bytes are decoded
        here as they arrive (httpx's own decoding would inflate each chunk in full first)."""
        # A response built in memory (a test transport) arrives already read and decoded.
        preread = response.is_stream_consumed
        encoding = "" if preread else response.headers.get("content-encoding", "")
        try:
            decoder = BodyDecoder(encoding, limit=self.max_bytes)
        except DecodeError as exc:
            raise ToolError(f"{response.url} cannot be shown: {exc}.") from None
        chunks: list[bytes] = []
        size = 0
        try:
            async for raw in _raw_chunks(response, preread):
                for piece in decoder.feed(raw):
                    chunks.append(piece)
                    size += len(piece)
                    if size >= self.max_bytes:
                        return b"".join(chunks)[: self.max_bytes], True
                    # One small raw chunk can inflate to many pieces: let others run between.
                    await asyncio.sleep(0)
                if decoder.cut:
                    break
            else:
                for piece in decoder.finish():
                    chunks.append(piece)
                    size += len(piece)
                    if size >= self.max_bytes:
                        return b"".join(chunks)[: self.max_bytes], True
        except httpx.HTTPError as exc:
            raise ToolError(f"Reading {response.url} failed: {_describe(exc)}.") from None
        except DecodeError as exc:
            raise ToolError(f"The body of {response.url} could not be decoded ({exc}).") from None
        return b"".join(chunks), decoder.cut

    async def _render(
        self, url: httpx.URL, response: httpx.Response, body: bytes, cut: bool, hops: list[str]
    ) -> ToolResult:
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        details: dict[str, Any] = {
            "url": str(url),
            "status": response.status_code,
            "content_type": content_type or None,
            "bytes": len(body),
            "redirects": hops,
            "download_cut": cut,
        }
        is_html = content_type in _HTML_TYPES or (
            not content_type
            and body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
        )
        textual = content_type.startswith(_TEXT_TYPES) or content_type.endswith(("+json", "+xml"))
        if not is_html and content_type and not textual:
            raise ToolError(
                f"{url} returned {content_type} content ({format_size(len(body))}), which "
                "is not text and cannot be shown.",
                details=details,
            )
        charset = _usable_charset(response.charset_encoding, url, details)
        notes: list[str] = []
        if cut:
            notes.append(f"the download was stopped at {format_size(self.max_bytes)}")
        if is_html:
            try:
                converted = await convert_html(
                    body, charset, timeout_s=self.convert_timeout_s, max_chars=self.max_chars
                )
            except ConversionError as exc:
                raise ToolError(
                    f"{url} could not be shown as text: {exc}.", details=details
                ) from None
            text = converted.text
            if converted.cut:
                notes.append(
                    f"only the first {format_size(HTML_CONVERT_MAX_BYTES)} of the page (without "
                    "scripts and styles) were converted"
                )
            if converted.flattened:
                notes.append(f"elements nested over {HTML_MAX_DEPTH} deep are shown as plain text")
        else:
            # Enough characters to reach the byte limit: truncating 2 MB would be wasted work.
            text = body.decode(charset or "utf-8", "replace")[: self.max_chars + 1]
        result = truncate_head(text, max_lines=10**9, max_bytes=self.max_chars)
        text = result.content
        if result.truncated:
            notes.append(f"the text was cut at {format_size(self.max_chars)}")
        header = f"URL: {url}\nStatus: {response.status_code}\n"
        if content_type:
            header += f"Content-Type: {content_type}\n"
        if notes:
            details["truncated"] = True
            text += "\n\n[Truncated: " + "; ".join(notes) + ".]"
        if response.status_code >= 400:
            excerpt = text[:2000]
            raise ToolError(
                f"{url} answered HTTP {response.status_code} {response.reason_phrase}.\n\n"
                f"{excerpt}",
                details=details,
            )
        return ToolResult.text(header + "\n" + (text or "(empty response)"), details)


_TLS_CONTEXT: ssl.SSLContext | None = None


async def _tls_context() -> ssl.SSLContext:
    """One TLS context for every fetch, built once in a thread: loading the CA bundle takes
    tens to hundreds of milliseconds, which a new client per fetch would spend on the loop."""
    global _TLS_CONTEXT
    if _TLS_CONTEXT is None:
        context = await asyncio.to_thread(httpx.create_ssl_context, trust_env=False)
        _TLS_CONTEXT = _TLS_CONTEXT or context
    return _TLS_CONTEXT


def _usable_charset(charset: str | None, url: httpx.URL, details: dict[str, Any]) -> str | None:
    """The declared charset if it is a character set Python can decode documents with; a clear
    error otherwise (not a bare LookupError). Codecs that are not document character sets are
    refused too: bytes-to-bytes ones ('zlib', 'rot13'), and text transforms such as 'punycode',
    whose decoder takes quadratic time (100 KB: 6 s of pure Python)."""
    if charset is None:
        return None
    try:
        info = codecs.lookup(charset)
    except LookupError:
        raise ToolError(
            f"{url} declares an unknown character set '{charset}', so its text cannot be read.",
            details=details,
        ) from None
    if info.name in _NOT_DOCUMENT_CHARSETS or not getattr(info, "_is_text_encoding", True):
        raise ToolError(
            f"{url} declares the character set '{charset}', which is not one documents are "
            "written in, so its text is not read.",
            details=details,
        )
    return charset


async def _raw_chunks(response: httpx.Response, preread: bool) -> AsyncIterator[bytes]:
    if preread:
        yield response.content
        return
    async for raw in response.aiter_raw():
        yield raw


def _describe(exc: Exception | None) -> str:
    if exc is None:
        return "no address to connect to"
    return str(exc) or type(exc).__name__
