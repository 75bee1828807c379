"""PostgreSQL connection strings shown without their secrets, in every form libpq accepts.

Owns: `redact_dsn` (what doctor, errors and logs print) and `dsn_secrets` (the values the log
filter replaces wherever they appear). libpq takes a password in the URI's userinfo
(`postgresql://tm:pw@host/db`), as a query parameter (`?password=pw`, `?sslpassword=pw`), and
in a key=value string (`host=db password='p w'`); masking only the first printed the others
in full.

Must not: import asyncpg (the CLI reads settings without it), or guess: a string it cannot read
is shown as a placeholder, never as it is.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK = "***"
SECRET_KEYS = frozenset({"password", "sslpassword"})
UNREADABLE = "postgresql://(unreadable connection string)"
# key = value in a libpq key=value string; a value is single-quoted (with \\ escapes) or bare.
_PAIR = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|[^\s']*)")


def _is_uri(dsn: str) -> bool:
    return dsn.split("://", 1)[0].lower() in ("postgresql", "postgres") and "://" in dsn


def redact_dsn(dsn: str) -> str:
    """`dsn` with every password and SSL key password replaced by ***."""
    if _is_uri(dsn):
        try:
            parts = urlsplit(dsn)
            query = parse_qsl(parts.query, keep_blank_values=True)
            password = parts.password
        except ValueError:
            return UNREADABLE
        netloc = parts.netloc
        if password is not None:
            user = netloc.rsplit("@", 1)[0].split(":", 1)[0]
            netloc = f"{user}:{MASK}@{netloc.rsplit('@', 1)[1]}"
        if any(key.lower() in SECRET_KEYS for key, _ in query):
            shown = [(k, MASK if k.lower() in SECRET_KEYS else v) for k, v in query]
            return urlunsplit(parts._replace(netloc=netloc, query=urlencode(shown, safe="*")))
        return urlunsplit(parts._replace(netloc=netloc))
    if "=" in dsn:
        return _PAIR.sub(
            lambda m: f"{m['key']}={MASK}" if m["key"].lower() in SECRET_KEYS else m[0], dsn
        )
    return dsn if not dsn.strip() else UNREADABLE


def dsn_secrets(dsn: str | None) -> list[str]:
    """Every secret value in `dsn`, as written and decoded (a log may show either)."""
    if not dsn:
        return []
    found: list[str] = []
    if _is_uri(dsn):
        try:
            parts = urlsplit(dsn)
            if parts.password:
                found.append(parts.password)
            raw_query = [pair.split("=", 1) for pair in parts.query.split("&") if "=" in pair]
            found += [v for k, v in raw_query if unquote(k).lower() in SECRET_KEYS and v]
        except ValueError:
            return []
    else:
        for match in _PAIR.finditer(dsn):
            if match["key"].lower() in SECRET_KEYS and match["value"]:
                value = match["value"]
                if value.startswith("'"):
                    value = re.sub(r"\\(.)", r"\1", value[1:-1])
                found.append(value)
    decoded = [unquote(value) for value in found]
    return sorted({value for value in [*found, *decoded] if value}, key=len, reverse=True)
