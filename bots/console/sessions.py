"""Signed cookies: who is signed in to the console, and the sign-in in progress.

Owns: `Signer` (HMAC-SHA256 over a compact JSON payload, with an expiry; anything altered,
expired or malformed reads as nothing), `ConsoleSession` (the person, their role, a random
session id), the CSRF token of a session (an HMAC of its id: a page's forms carry it, and a
change without it is refused), and the cookies' attributes (HttpOnly, SameSite=Lax, Secure
when the console is reached over HTTPS).

Must not: trust a cookie it did not sign; put a secret or a token into a cookie's payload.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any, Literal

SESSION_COOKIE = "teammate_console"
SIGNIN_COOKIE = "teammate_signin"
MAX_COOKIE_CHARS = 4096  # what browsers keep; anything longer is not ours

Role = Literal["admin", "viewer"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def same(given: str, expected: str) -> bool:
    """Constant-time equality of two texts, whatever characters a hostile one holds."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


class Signer:
    """Signs and checks small JSON payloads for one purpose (`purpose` is mixed into the
    key, so a sign-in cookie is never accepted as a session)."""

    def __init__(self, secret: str, purpose: str) -> None:
        self._key = hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).digest()

    def sign(self, payload: dict[str, Any], *, expires_at: float) -> str:
        body = _b64(json.dumps({**payload, "exp": expires_at}, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}"

    def read(self, value: str | None, *, now: float) -> dict[str, Any] | None:
        """The payload, or None if `value` is missing, altered, malformed or expired."""
        if not value or len(value) > MAX_COOKIE_CHARS or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        if not body.isascii():
            return None
        if not same(mac, self._mac(body)):
            return None
        try:
            payload = json.loads(_unb64(body))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if not isinstance(payload, dict):
            return None
        expires = payload.get("exp")
        if not isinstance(expires, int | float) or expires <= now:
            return None
        return payload

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest())

    def token(self, text: str) -> str:
        """A keyed digest of `text` (a session's CSRF token)."""
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())[:32]


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """Who is signed in: `person` is platform-qualified (`slack:U0123`)."""

    session_id: str
    person: str
    name: str
    role: Role
    expires_at: float

    @property
    def can_change(self) -> bool:
        return self.role == "admin"


class Sessions:
    """Session cookies and CSRF tokens under one secret."""

    def __init__(self, secret: str, *, lifetime_s: float) -> None:
        self._sessions = Signer(secret, "console-session")
        self._signin = Signer(secret, "console-signin")
        self._csrf = Signer(secret, "console-csrf")
        self.lifetime_s = lifetime_s

    def new(self, person: str, name: str, role: Role, *, now: float) -> tuple[ConsoleSession, str]:
        """A fresh session (a new id: signing in never keeps an earlier id) and its cookie."""
        session = ConsoleSession(
            secrets.token_urlsafe(18), person, name[:80], role, now + self.lifetime_s
        )
        payload = {"sid": session.session_id, "who": person, "name": session.name, "role": role}
        return session, self._sessions.sign(payload, expires_at=session.expires_at)

    def read(self, cookie: str | None, *, now: float) -> ConsoleSession | None:
        payload = self._sessions.read(cookie, now=now)
        if payload is None:
            return None
        sid, who, name, role = (payload.get(k) for k in ("sid", "who", "name", "role"))
        if not (isinstance(sid, str) and isinstance(who, str) and isinstance(name, str)):
            return None
        if role not in ("admin", "viewer"):
            return None
        return ConsoleSession(sid, who, name, role, float(payload["exp"]))

    def csrf_token(self, session: ConsoleSession) -> str:
        return self._csrf.token(session.session_id)

    def csrf_ok(self, session: ConsoleSession, given: str | None) -> bool:
        return bool(given) and same(str(given), self.csrf_token(session))

    def signin_cookie(self, payload: dict[str, Any], *, now: float, ttl_s: float) -> str:
        return self._signin.sign(payload, expires_at=now + ttl_s)

    def read_signin(self, cookie: str | None, *, now: float) -> dict[str, Any] | None:
        return self._signin.read(cookie, now=now)


def cookie_options(*, secure: bool, max_age: int | None) -> dict[str, Any]:
    """aiohttp `set_cookie` keywords: HttpOnly, SameSite=Lax, Secure over HTTPS, path /."""
    options: dict[str, Any] = {"httponly": True, "samesite": "Lax", "path": "/", "secure": secure}
    if max_age is not None:
        options["max_age"] = max_age
    return options
