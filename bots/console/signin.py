"""Signing in to the console: with Slack, with Discord, or with a one-time link.

Owns: the sign-in page; Slack's OpenID Connect (the authorize redirect with a state and a
nonce, the code exchanged with `openid.connect.token`, the ID token's nonce and audience
checked, the person read with `openid.connect.userInfo`); Discord's OAuth2 (`identify`, and
`guilds.members.read` when `[discord] admin_roles` must be read; the code exchanged at
`/oauth2/token`, the person at `/users/@me`, the roles at `/users/@me/guilds/{id}/member`);
one-time links (`teammate console link`: a random token whose hash is stored, good once, for
ten minutes); signing out; and auditing every sign-in (`console.sign_in`).

The state and nonce travel in a short-lived signed cookie, so a callback is accepted only in
the browser that started the sign-in. A refused person sees why, and no session is made.

Must not: log or show a code, a token or a client secret; follow a `next` that leaves the
console.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web

from bots.console.roles import discord_role_guild, role_for
from bots.console.sessions import SESSION_COOKIE, SIGNIN_COOKIE, cookie_options, same
from bots.console.web import DEPS, ConsoleDeps, deps_of, origin_of, render, session_of
from bots.features.audit import record_action
from bots.settings import Settings

log = logging.getLogger(__name__)

SIGNIN_TTL_S = 600.0  # a sign-in started must finish within this
LINK_TTL_S = 600.0  # `teammate console link`
PROVIDER_TIMEOUT_S = 10.0
MAX_PROVIDER_BYTES = 64 * 1024
DEFAULT_SLACK_API = "https://slack.com/api/"
DEFAULT_DISCORD_API = "https://discord.com/api/v10"


class SignInRefused(Exception):
    """Shown to the person as written (no secret in it)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def public_base(settings: Settings, request: web.Request | None = None) -> str:
    """The console's address as people open it: `[console] public_url`, else this request's,
    else `http://host:port`."""
    if settings.console.public_url:
        return settings.console.public_url.rstrip("/")
    if request is not None:
        return f"{request.scheme}://{request.host}"
    return f"http://{settings.console.host}:{settings.console.port}"


def slack_configured(settings: Settings) -> bool:
    secret = settings.slack_client_secret
    return bool(settings.slack_client_id and secret and secret.get_secret_value())


def discord_configured(settings: Settings) -> bool:
    secret = settings.discord_client_secret
    return bool(settings.discord_client_id and secret and secret.get_secret_value())


def sign_in_configured(settings: Settings) -> bool:
    return slack_configured(settings) or discord_configured(settings)


def _slack_api(settings: Settings) -> str:
    url = settings.slack_api_url or DEFAULT_SLACK_API
    return url if url.endswith("/") else url + "/"


def _slack_authorize_url(settings: Settings) -> str:
    # https://slack.com/api/ → https://slack.com/openid/connect/authorize
    parts = urlsplit(_slack_api(settings))
    root = parts.path.rstrip("/").rsplit("/", 1)[0]
    return f"{parts.scheme}://{parts.netloc}{root}/openid/connect/authorize"


def _discord_api(settings: Settings) -> str:
    return (settings.discord_api_url or DEFAULT_DISCORD_API).rstrip("/")


def _discord_authorize_url(settings: Settings) -> str:
    parts = urlsplit(_discord_api(settings))
    return f"{parts.scheme}://{parts.netloc}/oauth2/authorize"


# A path of the console with its query: no scheme, no host, no backslash, no whitespace or
# control character (browsers drop tabs and newlines: `/\t/evil.com` is `//evil.com`).
_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9/_.~%:@!$&'()*+,;=?-]*")


def safe_next(value: str | None) -> str:
    """A path inside the console, or `/` (never another site: `//evil`, `/\\evil`)."""
    if not value or len(value) > 500 or not _LOCAL_PATH.fullmatch(value):
        return "/"
    return value


def _secure(deps: ConsoleDeps, request: web.Request) -> bool:
    return deps.settings.console.public_url.startswith("https://") or request.secure


# -- pages -------------------------------------------------------------------------------------


async def signin_page(request: web.Request) -> web.Response:
    settings = deps_of(request).settings
    return render(
        request,
        "signin.html",
        {
            "title": "Sign in",
            "next": safe_next(request.query.get("next")),
            "slack": slack_configured(settings),
            "discord": discord_configured(settings),
            "problem": "",
        },
    )


def _refused(request: web.Request, problem: str, status: int = 403) -> web.Response:
    settings = deps_of(request).settings
    return render(
        request,
        "signin.html",
        {
            "title": "Sign in",
            "next": "/",
            "slack": slack_configured(settings),
            "discord": discord_configured(settings),
            "problem": problem,
        },
        status=status,
    )


async def start_slack(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    if not slack_configured(deps.settings):
        raise web.HTTPNotFound(text="Sign in with Slack is not configured.")
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    params = {
        "response_type": "code",
        "scope": "openid profile",
        "client_id": deps.settings.slack_client_id or "",
        "state": state,
        "nonce": nonce,
        "redirect_uri": public_base(deps.settings, request) + "/auth/slack/callback",
    }
    return _redirect_with_state(
        request, f"{_slack_authorize_url(deps.settings)}?{urlencode(params)}", "slack", state, nonce
    )


async def start_discord(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    if not discord_configured(deps.settings):
        raise web.HTTPNotFound(text="Sign in with Discord is not configured.")
    state = secrets.token_urlsafe(24)
    scopes = ["identify"]
    if deps.settings.discord.admin_roles and discord_role_guild(deps.settings):
        scopes.append("guilds.members.read")
    params = {
        "response_type": "code",
        "client_id": deps.settings.discord_client_id or "",
        "scope": " ".join(scopes),
        "state": state,
        "redirect_uri": public_base(deps.settings, request) + "/auth/discord/callback",
        "prompt": "none",
    }
    url = f"{_discord_authorize_url(deps.settings)}?{urlencode(params)}"
    return _redirect_with_state(request, url, "discord", state, "")


def _redirect_with_state(
    request: web.Request, url: str, provider: str, state: str, nonce: str
) -> web.StreamResponse:
    deps = deps_of(request)
    going = safe_next(request.query.get("next"))
    cookie = deps.sessions.signin_cookie(
        {"p": provider, "state": state, "nonce": nonce, "next": going},
        now=deps.clock(),
        ttl_s=SIGNIN_TTL_S,
    )
    response = web.HTTPSeeOther(url)
    response.set_cookie(
        SIGNIN_COOKIE, cookie, **cookie_options(secure=_secure(deps, request), max_age=600)
    )
    return response


def _started(request: web.Request, provider: str) -> dict[str, Any]:
    """The sign-in this browser started with `provider`, its state matching the callback's."""
    deps = deps_of(request)
    started = deps.sessions.read_signin(request.cookies.get(SIGNIN_COOKIE), now=deps.clock())
    given = request.query.get("state", "")
    if started is None or started.get("p") != provider:
        raise SignInRefused("This sign-in was not started here, or took too long. Try again.")
    if not same(given, str(started.get("state", ""))):
        raise SignInRefused("The sign-in's state did not match. Try again.")
    if "error" in request.query:
        raise SignInRefused("The sign-in was cancelled.")
    if not request.query.get("code"):
        raise SignInRefused("The sign-in came back without a code. Try again.")
    return started


async def slack_callback(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    try:
        started = _started(request, "slack")
        person, name = await _slack_person(deps, request, started)
    except SignInRefused as exc:
        return _refused(request, str(exc))
    return await _signed_in(request, person, name, str(started["next"]), discord_roles=())


async def discord_callback(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    try:
        started = _started(request, "discord")
        person, name, roles = await _discord_person(deps, request)
    except SignInRefused as exc:
        return _refused(request, str(exc))
    return await _signed_in(request, person, name, str(started["next"]), discord_roles=roles)


async def _slack_person(
    deps: ConsoleDeps, request: web.Request, started: Mapping[str, Any]
) -> tuple[str, str]:
    settings = deps.settings
    api = _slack_api(settings)
    secret = settings.slack_client_secret
    form = {
        "client_id": settings.slack_client_id or "",
        "client_secret": secret.get_secret_value() if secret else "",
        "code": request.query["code"],
        "redirect_uri": public_base(settings, request) + "/auth/slack/callback",
    }
    token = await _call(deps, "POST", api + "openid.connect.token", data=form)
    if token.get("ok") is not True or not isinstance(token.get("access_token"), str):
        raise SignInRefused(f"Slack refused the sign-in ({_slack_error(token)}).")
    claims = _id_token_claims(token.get("id_token"))
    if not same(str(claims.get("nonce", "")), str(started.get("nonce", ""))):
        raise SignInRefused("Slack's answer was for another sign-in (nonce). Try again.")
    if claims.get("aud") != settings.slack_client_id:
        raise SignInRefused("Slack's answer was for another app. Check SLACK_CLIENT_ID.")
    info = await _call(
        deps,
        "POST",
        api + "openid.connect.userInfo",
        headers={"Authorization": f"Bearer {token['access_token']}"},
    )
    user_id = info.get("https://slack.com/user_id") or info.get("sub")
    if info.get("ok") is not True or not isinstance(user_id, str) or not user_id.isalnum():
        raise SignInRefused(f"Slack did not say who you are ({_slack_error(info)}).")
    if claims.get("sub") not in (None, user_id, info.get("sub")):
        raise SignInRefused("Slack's answers named two people. Try again.")
    name = info.get("name") if isinstance(info.get("name"), str) else user_id
    return f"slack:{user_id}", str(name)


def _slack_error(body: Mapping[str, Any]) -> str:
    error = body.get("error")
    return error[:60] if isinstance(error, str) else "no reason given"


def _id_token_claims(id_token: object) -> dict[str, Any]:
    """The ID token's claims. Its signature is not checked: it came straight from Slack over
    the connection that exchanged the code (OpenID Connect Core 3.1.3.7), not via the browser."""
    if not isinstance(id_token, str) or id_token.count(".") != 2:
        raise SignInRefused("Slack's answer had no ID token.")
    body = id_token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise SignInRefused("Slack's ID token could not be read.") from None
    if not isinstance(claims, dict):
        raise SignInRefused("Slack's ID token could not be read.")
    return claims


async def _discord_person(deps: ConsoleDeps, request: web.Request) -> tuple[str, str, list[str]]:
    settings = deps.settings
    api = _discord_api(settings)
    secret = settings.discord_client_secret
    form = {
        "grant_type": "authorization_code",
        "code": request.query["code"],
        "redirect_uri": public_base(settings, request) + "/auth/discord/callback",
        "client_id": settings.discord_client_id or "",
        "client_secret": secret.get_secret_value() if secret else "",
    }
    token = await _call(deps, "POST", api + "/oauth2/token", data=form)
    access = token.get("access_token")
    if not isinstance(access, str):
        raise SignInRefused("Discord refused the sign-in. Try again.")
    bearer = {"Authorization": f"Bearer {access}"}
    me = await _call(deps, "GET", api + "/users/@me", headers=bearer)
    user_id = me.get("id")
    if not isinstance(user_id, str) or not user_id.isdigit():
        raise SignInRefused("Discord did not say who you are.")
    name = me.get("global_name") or me.get("username") or user_id
    roles: list[str] = []
    guild = discord_role_guild(settings)
    if settings.discord.admin_roles and guild and "guilds.members.read" in str(token.get("scope")):
        member = await _call(
            deps, "GET", f"{api}/users/@me/guilds/{guild}/member", headers=bearer, missing_ok=True
        )
        found = member.get("roles")
        if isinstance(found, list):
            roles = [str(role) for role in found[:250]]
    return f"discord:{user_id}", str(name), roles


async def _call(
    deps: ConsoleDeps,
    method: str,
    url: str,
    *,
    data: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    missing_ok: bool = False,
) -> dict[str, Any]:
    """One call to Slack or Discord: its JSON object (bounded), or `SignInRefused`."""
    session = deps.http
    if session is None:
        raise SignInRefused("Sign-in is not available in this process.")
    try:
        async with asyncio.timeout(PROVIDER_TIMEOUT_S):
            async with session.request(method, url, data=data, headers=headers) as response:
                raw = await response.content.read(MAX_PROVIDER_BYTES + 1)
                status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("console sign-in: %s %s failed: %s", method, urlsplit(url).path, type(exc))
        raise SignInRefused("Could not reach the sign-in provider. Try again.") from None
    if len(raw) > MAX_PROVIDER_BYTES:
        raise SignInRefused("The sign-in provider's answer was too large.")
    if status == 404 and missing_ok:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SignInRefused(f"The sign-in provider answered {status} without JSON.")
    if status >= 400 and "ok" not in body:
        raise SignInRefused(f"The sign-in provider refused ({status}).")
    return body


async def _signed_in(
    request: web.Request,
    person: str,
    name: str,
    next_path: str,
    *,
    discord_roles: list[str] | tuple[str, ...],
) -> web.StreamResponse:
    """Make the session (or refuse), audit it, and go where the person was going."""
    deps = deps_of(request)
    role = role_for(deps.settings, person, discord_roles=discord_roles)
    how = request.path.split("/")[2] if request.path.count("/") >= 2 else "link"
    if role is None:
        log.info("console: refused %s (%s): not an admin or viewer", person, how)
        return _refused(
            request,
            f"{person} may not use this console: ask an admin to add you to [console] viewers "
            "(or the admins).",
        )
    _session, cookie = deps.sessions.new(person, name, role, now=deps.clock())
    await record_action(
        deps.store,
        actor=person,
        action="console.sign_in",
        target=role,
        origin=origin_of(request),
        detail={"with": how},
    )
    response = web.HTTPSeeOther(safe_next(next_path))
    secure = _secure(deps, request)
    max_age = int(deps.sessions.lifetime_s)
    response.set_cookie(SESSION_COOKIE, cookie, **cookie_options(secure=secure, max_age=max_age))
    response.del_cookie(SIGNIN_COOKIE, path="/")
    return response


# -- one-time links ----------------------------------------------------------------------------


async def create_link(deps: ConsoleDeps, person: str, *, by: str) -> str:
    """A sign-in URL for `person`, good once for ten minutes; audited (`console.link`)."""
    token = secrets.token_urlsafe(32)
    now = await deps.store.now()
    await deps.store.add_console_link(hash_token(token), person, expires_at=now + LINK_TTL_S)
    await record_action(
        deps.store, actor=by, action="console.link", target=person, origin="terminal"
    )
    return f"{public_base(deps.settings)}/auth/link/{token}"


async def link_page(request: web.Request) -> web.Response:
    """A button, not the sign-in itself: a link preview fetching the URL must not use it up."""
    token = request.match_info["token"]
    return render(request, "link.html", {"title": "Sign in", "token": token[:100]})


async def use_link(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    form = await request.post()
    token = form.get("token")
    if not isinstance(token, str) or not 20 <= len(token) <= 100:
        return _refused(request, "This sign-in link is not valid.", status=400)
    person = await deps.store.use_console_link(hash_token(token), now=await deps.store.now())
    if person is None:
        return _refused(request, "This sign-in link was used already or has expired.")
    return await _signed_in(request, person, person, "/", discord_roles=())


async def sign_out(request: web.Request) -> web.StreamResponse:
    if session_of(request) is None:
        raise web.HTTPSeeOther("/signin")
    response = web.HTTPSeeOther("/signin")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/signin", signin_page)
    app.router.add_get("/auth/slack", start_slack)
    app.router.add_get("/auth/slack/callback", slack_callback)
    app.router.add_get("/auth/discord", start_discord)
    app.router.add_get("/auth/discord/callback", discord_callback)
    app.router.add_get("/auth/link/{token}", link_page)
    app.router.add_post("/auth/link", use_link)
    app.router.add_post("/signout", sign_out)


__all__ = ["DEPS", "add_routes", "create_link", "sign_in_configured"]
