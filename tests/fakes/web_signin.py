"""Sign-in endpoints of the fake Slack and the fake Discord: OpenID Connect (Slack) and OAuth2
(Discord), enforcing what the real services document.

Owns: `OAuthApp` (a registered app: client id, secret, redirect URIs), `SlackOidc` (the
browser's `/openid/connect/authorize`, the Web API methods `openid.connect.token` and
`openid.connect.userInfo`) and `DiscordOAuth` (the browser's `/oauth2/authorize`,
`POST /oauth2/token`, `GET /users/@me`, `GET /users/@me/guilds/{id}/member` with a Bearer
token).

Rules enforced (as the services do): the client must be registered and its secret right; the
redirect URI must be one registered and, at the exchange, the one the code was issued for; a
code is good once and briefly; an access token only for the person it was issued to, only
with the scopes granted (`guilds.members.read` for a member's roles). Who signs in is set by
the test (`signs_in`): the fake's authorize page approves at once, as a person who already
consented would see.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

CODE_TTL_S = 600.0


@dataclass(slots=True)
class OAuthApp:
    client_id: str
    client_secret: str
    redirect_uris: list[str] = field(default_factory=list)  # empty: any 127.0.0.1 URI


@dataclass(slots=True)
class _Code:
    client_id: str
    redirect_uri: str
    person: dict[str, Any]
    scopes: set[str]
    nonce: str | None
    issued: float
    used: bool = False


class _OAuthServer:
    def __init__(self) -> None:
        self.apps: dict[str, OAuthApp] = {}
        self.person: dict[str, Any] | None = None  # who approves the next authorize
        self.codes: dict[str, _Code] = {}
        self.tokens: dict[str, _Code] = {}
        self.exchanges: list[dict[str, Any]] = []  # what each code exchange asked (for tests)

    def register(self, client_id: str, client_secret: str, *redirect_uris: str) -> OAuthApp:
        app = OAuthApp(client_id, client_secret, list(redirect_uris))
        self.apps[client_id] = app
        return app

    def _redirect_ok(self, app: OAuthApp, uri: str) -> bool:
        if app.redirect_uris:
            return uri in app.redirect_uris
        return uri.startswith("http://127.0.0.1:")

    def _authorize(self, query: Any, required_scope: str) -> web.StreamResponse:
        app = self.apps.get(query.get("client_id", ""))
        redirect_uri = query.get("redirect_uri", "")
        if app is None or not self._redirect_ok(app, redirect_uri):
            return web.Response(status=400, text="invalid client_id or redirect_uri")
        scopes = set(query.get("scope", "").split())
        if query.get("response_type") != "code" or required_scope not in scopes:
            return web.Response(status=400, text="invalid response_type or scope")
        state = query.get("state", "")
        if self.person is None:
            raise web.HTTPFound(
                f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}"
            )
        code = secrets.token_urlsafe(16)
        self.codes[code] = _Code(
            app.client_id, redirect_uri, dict(self.person), scopes, query.get("nonce"), time.time()
        )
        raise web.HTTPFound(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}")

    def _exchange(self, args: dict[str, Any], client_id: str, client_secret: str) -> _Code | str:
        self.exchanges.append({k: v for k, v in args.items() if k != "client_secret"})
        app = self.apps.get(client_id)
        if app is None or not secrets.compare_digest(app.client_secret, client_secret):
            return "invalid_client"
        code = self.codes.get(str(args.get("code", "")))
        if code is None or code.used or time.time() - code.issued > CODE_TTL_S:
            return "invalid_code"
        if code.client_id != client_id:
            return "invalid_code"
        if args.get("redirect_uri") != code.redirect_uri:
            return "bad_redirect_uri"
        code.used = True
        return code

    def _bearer(self, headers: Any) -> _Code | None:
        value = headers.get("Authorization") or headers.get("authorization") or ""
        if not value.lower().startswith("bearer "):
            return None
        return self.tokens.get(value[7:].strip())

    def _issue(self, code: _Code) -> str:
        token = secrets.token_urlsafe(24)
        self.tokens[token] = code
        return token


def _unsigned_jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


class SlackOidc(_OAuthServer):
    """Sign in with Slack. `signs_in(user_id, team_id, name)` before the browser goes."""

    def signs_in(self, user_id: str, team_id: str = "T0TEAM", name: str = "") -> None:
        self.person = {"user_id": user_id, "team_id": team_id, "name": name or user_id}

    async def authorize(self, request: web.Request) -> web.StreamResponse:
        return self._authorize(request.query, "openid")

    def answer(self, method: str, args: dict[str, Any], headers: Any) -> dict[str, Any]:
        if method == "openid.connect.token":
            found = self._exchange(
                args, str(args.get("client_id", "")), str(args.get("client_secret", ""))
            )
            if isinstance(found, str):
                return {"ok": False, "error": found}
            person = found.person
            claims = {
                "iss": "https://slack.com",
                "sub": person["user_id"],
                "aud": found.client_id,
                "exp": int(time.time()) + 3600,
                "iat": int(time.time()),
                "nonce": found.nonce,
                "https://slack.com/user_id": person["user_id"],
                "https://slack.com/team_id": person["team_id"],
            }
            return {
                "ok": True,
                "access_token": self._issue(found),
                "token_type": "Bearer",
                "id_token": _unsigned_jwt(claims),
            }
        if method == "openid.connect.userInfo":
            code = self._bearer(headers) or self.tokens.get(str(args.get("token", "")))
            if code is None:
                return {"ok": False, "error": "invalid_auth"}
            person = code.person
            return {
                "ok": True,
                "sub": person["user_id"],
                "https://slack.com/user_id": person["user_id"],
                "https://slack.com/team_id": person["team_id"],
                "name": person["name"],
            }
        return {"ok": False, "error": "unknown_method"}


class DiscordOAuth(_OAuthServer):
    """Sign in with Discord. `signs_in(user_id, name, roles={guild: [role ids]})` first."""

    def signs_in(
        self, user_id: str, name: str = "", *, roles: dict[str, list[str]] | None = None
    ) -> None:
        self.person = {"id": user_id, "username": name or f"user{user_id}", "roles": roles or {}}

    async def authorize(self, request: web.Request) -> web.StreamResponse:
        return self._authorize(request.query, "identify")

    def token(self, form: dict[str, Any], headers: Any) -> tuple[dict[str, Any], int]:
        client_id, secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
        basic = headers.get("Authorization", "")
        if basic.lower().startswith("basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
        if form.get("grant_type") != "authorization_code":
            return {"error": "unsupported_grant_type"}, 400
        found = self._exchange(form, client_id, secret)
        if isinstance(found, str):
            error = "invalid_client" if found == "invalid_client" else "invalid_grant"
            return {"error": error}, 401 if error == "invalid_client" else 400
        return {
            "access_token": self._issue(found),
            "token_type": "Bearer",
            "expires_in": 604800,
            "scope": " ".join(sorted(found.scopes)),
        }, 200

    def rest(self, method: str, path: str, headers: Any) -> tuple[dict[str, Any], int] | None:
        """The Bearer-token routes; None for a path that is not one of them."""
        if method != "GET" or not path.startswith("/users/@me"):
            return None
        code = self._bearer(headers)
        if code is None:
            return {"message": "401: Unauthorized", "code": 0}, 401
        person = code.person
        if path == "/users/@me":
            return {
                "id": person["id"],
                "username": person["username"],
                "global_name": person["username"],
                "discriminator": "0",
                "avatar": None,
            }, 200
        prefix, _, rest = path.partition("/users/@me/guilds/")
        guild_id, _, tail = rest.partition("/")
        if prefix or tail != "member":
            return None
        if "guilds.members.read" not in code.scopes:
            return {"message": "Missing Access", "code": 50001}, 403
        if guild_id not in person["roles"]:
            return {"message": "Unknown Guild", "code": 10004}, 404
        return {"roles": person["roles"][guild_id], "user": {"id": person["id"]}}, 200
