"""The web_fetch tool: GET one http(s) URL and return it as readable text.

Owns: `WebFetchTool`, the address policy (`is_forbidden_address`, `AddressPolicy`) and body
decoding (`BodyDecoder`). HTML → Markdown is `tools.content`'s, run in a child process with a
deadline (`convert_html`) so a big or deeply nested page never runs on the event loop.

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

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import re
import socket
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
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

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
TransportFactory = Callable[[], httpx.AsyncBaseTransport]

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "Teammate/0.1 (web_fetch; +https://github.com/)"

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPAT = ipaddress.ip_network("::/96")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_HTML_TYPES = ("text/html", "application/xhtml+xml")

# Decoded output is produced in pieces of at most this size; nothing larger is ever inflated
# at once, whatever the compression ratio.
DECODE_CHUNK = 64 * 1024
MAX_ENCODING_LAYERS = 4
# What we can decode ourselves (brotli and zstd are not installed): asked for explicitly, so a
# server has no reason to send anything else.
ACCEPT_ENCODING = "gzip, deflate"
_ENCODING_ALIASES = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
_GZIP_MAGIC = b"\x1f\x8b"
# Python text codecs that are transforms, not character sets (by their canonical names).
_NOT_DOCUMENT_CHARSETS = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "undefined", "charmap"}
)


def is_forbidden_address(ip: IPAddress) -> str | None:
    """Why an address may not be fetched by default (a short class name), or None if public."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip.teredo is not None:
            embedded = ip.teredo[1]
        if embedded is None and (ip in _NAT64 or ip in _IPV4_COMPAT):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            inner = is_forbidden_address(embedded)
            if inner is not None:
                return f"{inner} (inside an IPv6 address)"
        if ip in _NAT64_LOCAL:
            return "private"
        if ip.is_site_local:  # fec0::/10: deprecated, but still routed inside some networks
            return "site-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (includes cloud metadata)"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "shared (CGNAT)"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "non-public"
    return None


_LEGACY_V4 = re.compile(r"(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}", re.IGNORECASE)


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host names by itself, or None for a name to resolve.

    Besides standard forms this accepts what `inet_aton` does (2130706433, 0177.0.0.1,
    0x7f.1, 127.1): many resolvers and HTTP stacks honour them, so they must be checked too.
    """
    bare = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    if _LEGACY_V4.fullmatch(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """Every address the system resolver gives for `host`."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which hosts may be fetched although they are not public: `allow_hosts` entries are
    `host` (any port) or `host:port`; IPv6 as `[::1]:8080`. An entry matches the host exactly as
    the URL writes it (case-insensitively): allowing 127.0.0.1 does not allow `localhost`."""

    allow_hosts: tuple[str, ...] = ()

    def allows(self, host: str, port: int) -> bool:
        host = host.strip("[]").lower().rstrip(".")
        for entry in self.allow_hosts:
            name, entry_port = _split_host_port(entry)
            if name == host and (entry_port is None or entry_port == port):
                return True
        return False


def _split_host_port(entry: str) -> tuple[str, int | None]:
    entry = entry.strip().lower()
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name.rstrip("."), int(port)
    return entry.rstrip("."), None


class DecodeError(ValueError):
    """The body does not decode as its Content-Encoding says."""


class _Inflater:
    """One gzip or deflate layer, inflated in pieces of at most DECODE_CHUNK and stopped
    (`cut`) once it has produced `limit` bytes."""

    def __init__(self, kind: str, limit: int) -> None:
        self.kind = kind
        self.limit = limit
        self.produced = 0
        self.cut = False
        self._head = b""  # deflate: the first bytes, until the zlib wrapper can be recognised
        self._ended = False  # the current stream (gzip member) is complete
        self._after_end = b""  # what followed it, until it is known to be a member or junk
        self._junk = False
        self._inflater: Any = zlib.decompressobj(16 + zlib.MAX_WBITS) if kind == "gzip" else None

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inflater is None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            self._inflater = zlib.decompressobj(_deflate_wbits(data))
        yield from self._inflate(data)

    def finish(self) -> Iterator[bytes]:
        if self._inflater is None and self._head:
            self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            yield from self._inflate(self._head)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        while not self.cut:
            if self._ended:
                # After the end of the stream: another gzip member (a valid body may be several
                # concatenated), or padding and junk, which are ignored to the end.
                if self.kind != "gzip" or self._junk:
                    return
                self._after_end += data
                if len(self._after_end) < len(_GZIP_MAGIC):
                    return
                if not self._after_end.startswith(_GZIP_MAGIC):
                    self._junk, self._after_end = True, b""
                    return
                data, self._after_end, self._ended = self._after_end, b"", False
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = self._inflater.decompress(data, DECODE_CHUNK)
            except zlib.error as exc:
                raise DecodeError(f"bad {self.kind} data: {exc}") from None
            if out:
                self.produced += len(out)
                self.cut = self.produced >= self.limit
                yield out
            if self._inflater.eof:
                self._ended = True
                data = self._inflater.unused_data
                continue
            data = self._inflater.unconsumed_tail
            # A full piece may leave output pending inside zlib: ask again until it is short.
            if not data and len(out) < DECODE_CHUNK:
                return


def _deflate_wbits(head: bytes) -> int:
    """`deflate` is meant to be zlib-wrapped, but some servers send raw deflate."""
    if head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return zlib.MAX_WBITS
    return -zlib.MAX_WBITS


class BodyDecoder:
    """Undoes a response's Content-Encoding layers as raw bytes arrive, bounded at every layer.

    The decoded output stops after `limit` bytes, and the raw input and every inner layer after
    twice that (compressed data can be a little larger than what it holds), so the work is
    bounded by a few times `limit` however the layers are stacked; decoded pieces are at most
    DECODE_CHUNK. Raises DecodeError for an encoding it cannot undo.
    """

    def __init__(self, content_encoding: str, *, limit: int) -> None:
        names = [part.strip().lower() for part in content_encoding.split(",")]
        names = [name for name in names if name and name != "identity"]
        if len(names) > MAX_ENCODING_LAYERS:
            raise DecodeError(
                f"the body is encoded {len(names)} times, more than {MAX_ENCODING_LAYERS}"
            )
        for name in names:
            if name not in _ENCODING_ALIASES:
                raise DecodeError(
                    f"the body is sent with Content-Encoding '{name}', which cannot be decoded "
                    f"(supported: {ACCEPT_ENCODING})"
                )
        self.limit = limit
        self.raw_bytes = 0
        self._raw_cut = False
        inner_limit = 2 * limit + 1024
        self._raw_limit = inner_limit if names else limit
        # Encodings are listed in the order they were applied: undo the last one first.
        self._layers = [
            _Inflater(_ENCODING_ALIASES[name], limit if index == 0 else inner_limit)
            for index, name in enumerate(names)
        ][::-1]

    @property
    def cut(self) -> bool:
        """Whether something was left undecoded because a limit was reached."""
        return self._raw_cut or any(layer.cut for layer in self._layers)

    def feed(self, raw: bytes) -> Iterator[bytes]:
        if self._raw_cut:
            return
        self.raw_bytes += len(raw)
        if self.raw_bytes >= self._raw_limit:
            self._raw_cut = True
            raw = raw[: len(raw) - (self.raw_bytes - self._raw_limit)]
        yield from self._through(0, raw)

    def finish(self) -> Iterator[bytes]:
        for index, layer in enumerate(self._layers):
            for piece in layer.finish():
                yield from self._through(index + 1, piece)

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            for start in range(0, len(data), DECODE_CHUNK):
                yield data[start : start + DECODE_CHUNK]
            return
        for piece in self._layers[index].feed(data):
            yield from self._through(index + 1, piece)


class WebFetchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The http:// or https:// URL to fetch.")


@dataclass(frozen=True, slots=True)
class _Target:
    url: httpx.URL
    host: str
    port: int
    addresses: list[str]


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

    async def check_url(self, raw: str | httpx.URL) -> _Target:
        """Parse, resolve and check a URL; raise ToolError if it may not be fetched. No
        connection is made here."""
        try:
            url = raw if isinstance(raw, httpx.URL) else httpx.URL(raw.strip())
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise ToolError(f"Refused: '{raw}' is not a valid URL ({exc}).") from None
        if url.scheme not in ("http", "https"):
            raise ToolError(
                f"Refused: only http:// and https:// URLs can be fetched, not '{url.scheme}:'."
            )
        if not url.host:
            raise ToolError(f"Refused: '{raw}' has no host.")
        if url.userinfo:
            raise ToolError("Refused: URLs with a user name or password are not fetched.")
        host = url.raw_host.decode("ascii").lower()
        port = url.port or (443 if url.scheme == "https" else 80)
        allowed_name = self.policy.allows(host, port)
        literal = parse_ip_literal(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = list(await self.resolver(host, port))
            except (OSError, UnicodeError) as exc:
                raise ToolError(f"Could not resolve the host '{host}': {exc}.") from None
            if not addresses:
                raise ToolError(f"Could not resolve the host '{host}'.")
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            why = is_forbidden_address(ip)
            if why is None or allowed_name:
                continue
            shown = host if literal is not None else f"{host} (resolves to {ip})"
            raise ToolError(
                f"Refused: {shown} is a {why} address. Fetching internal or local network "
                "addresses is not allowed unless an administrator allows the host."
            )
        pinned = [str(ipaddress.ip_address(a.split("%", 1)[0])) for a in addresses]
        return _Target(url, host, port, pinned)

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

    async def _send(self, client: httpx.AsyncClient, target: _Target) -> httpx.Response:
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
