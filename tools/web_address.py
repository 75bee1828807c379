"""Which URLs web_fetch may fetch, and from which addresses: the SSRF guard.

Owns: `check_url` (parse, resolve once, check every address; no connection is made),
`FetchTarget` (the URL and the checked addresses a fetch is pinned to), the address classes
refused by default (`is_forbidden_address`), IP literals in every form a resolver or HTTP stack
honours (`parse_ip_literal`), the administrator's exceptions (`AddressPolicy`) and the system
resolver. The rules are listed in `tools.web_fetch`'s docstring.

Must not: import anything of ours outside `core`; connect anywhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from core.tools import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPAT = ipaddress.ip_network("::/96")


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


@dataclass(frozen=True, slots=True)
class FetchTarget:
    url: httpx.URL
    host: str
    port: int
    addresses: list[str]


async def check_url(raw: str | httpx.URL, policy: AddressPolicy, resolver: Resolver) -> FetchTarget:
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
    allowed_name = policy.allows(host, port)
    literal = parse_ip_literal(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = list(await resolver(host, port))
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
    return FetchTarget(url, host, port, pinned)


# -- fetching --------------------------------------------------------------------------
