"""The console's aiohttp application and the one HTTP server of a process.

Owns: `build_app` (the routes of every page, `/healthz`, the static assets, and the places
where `/metrics` and Slack HTTP mode's `/slack/events` are mounted on the same server),
the middlewares every request passes (security headers and a strict Content-Security-Policy;
the session; sign-in required for every page; a change — any method but GET/HEAD — refused
without the session's CSRF token or from another origin), and `HttpServer` (listening, the
bound port, closing).

Why one server: an orchestrator probes one port, and Slack HTTP mode's endpoint and the
console share a process's lifetime; `/slack/events` keeps its own gate (signature first) and
is exempt from sessions and CSRF (Slack signs it instead).

Must not: render a page's content (its `pages_*` module does) or write SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web

from bots.console import (
    conversations,
    feedback,
    metrics,
    pages_audit,
    pages_channels,
    pages_health,
    pages_overview,
    signin,
)
from bots.console.web import (
    DEPS,
    MAX_FORM_BYTES,
    NAV,
    NAV_SHOWN,
    SESSION_KEY,
    ConsoleDeps,
    read_session,
    render,
)

log = logging.getLogger(__name__)

# Every script, style and image from this origin; no inline script, no frames, no plugins.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
# Larger bodies are refused before they are read (Slack's gate caps its own at 1 MiB).
CLIENT_MAX_SIZE = 1024 * 1024
# Paths open to anyone: sign-in itself, the assets, the probes, and what another system signs.
PUBLIC_PREFIXES = ("/signin", "/auth/", "/static/", "/healthz", "/metrics", "/slack/")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Mount = Callable[[web.Application], None]

# Each page module's `add_routes(app)`. The Conversations and Feedback pages (and their
# traces) add theirs here the same way.
PAGE_ROUTES: tuple[Mount, ...] = (
    pages_overview.add_routes,
    pages_channels.add_routes,
    pages_audit.add_routes,
    pages_health.add_routes,
    conversations.add_routes,
    feedback.add_routes,
    metrics.add_routes,
)


# What is served beside the pages, always (also where the pages are not): `/metrics`
# (Prometheus text) adds its `add_routes` here.
SERVICE_ROUTES: tuple[Mount, ...] = ()


def static_dir() -> Path:
    return Path(str(resources.files("bots.console") / "static"))


def _public(path: str) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p) for p in PUBLIC_PREFIXES)


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = _as_page(request, exc)
    if not request.path.startswith("/slack/"):
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if not request.path.startswith("/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
    if isinstance(response, web.HTTPException):
        raise response
    return response


@web.middleware
async def signed_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The session on every request; pages need one, changes need its CSRF token."""
    session = read_session(request)
    if session is not None:
        request[SESSION_KEY] = session
    if _public(request.path):
        return await handler(request)
    if session is None:
        if request.method in SAFE_METHODS:
            raise web.HTTPSeeOther(f"/signin?next={quote(request.path_qs, safe='')}")
        raise web.HTTPUnauthorized(text="Sign in first.")
    if request.method not in SAFE_METHODS:
        await _check_change(request)
    return await handler(request)


async def _check_change(request: web.Request) -> None:
    """A change must come from a console page: same origin, the session's CSRF token."""
    deps = request.app[DEPS]
    session = request[SESSION_KEY]
    if (request.content_length or 0) > MAX_FORM_BYTES:
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_FORM_BYTES, actual_size=request.content_length or 0
        )
    origin = request.headers.get("Origin")
    if origin is not None and origin != "null" and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text="This change came from another site; refused.")
    given = request.headers.get("X-CSRF-Token")
    if given is None and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        form = await request.post()
        value = form.get("csrf")
        given = value if isinstance(value, str) else None
    if not deps.sessions.csrf_ok(session, given):
        raise web.HTTPForbidden(text="The form had expired or was not from this console; reload.")


def _as_page(request: web.Request, exc: web.HTTPException) -> web.HTTPException:
    """A refusal's short text as a console page (readable, and swapped in by htmx)."""
    if exc.status < 400 or exc.content_type != "text/plain" or not _is_console(request.path):
        return exc
    page = render(request, "error.html", {"title": exc.reason, "problem": exc.text or ""})
    exc.body = page.body
    exc.content_type = "text/html"
    exc.charset = "utf-8"
    return exc


def _is_console(path: str) -> bool:
    return not path.startswith(("/slack/", "/static/", "/metrics", "/healthz"))


async def healthz(request: web.Request) -> web.Response:
    """For orchestrators: 200 while the database answers, 503 otherwise."""
    deps = request.app[DEPS]
    try:
        await deps.store.now()
    except Exception:
        log.warning("healthz: the database did not answer", exc_info=True)
        return web.json_response({"ok": False, "database": "unreachable"}, status=503)
    return web.json_response({"ok": True})


def build_app(
    deps: ConsoleDeps, *, mounts: Sequence[Mount] = (), pages: bool = True
) -> web.Application:
    """The console's application. `mounts` add what shares the server (Slack HTTP mode's
    `/slack/events`); without `pages`, only `/healthz`, `SERVICE_ROUTES` and `mounts`."""
    app = web.Application(
        middlewares=[security_headers, signed_in], client_max_size=CLIENT_MAX_SIZE
    )
    app[DEPS] = deps
    app.router.add_get("/healthz", healthz)
    for add in SERVICE_ROUTES:
        add(app)
    if pages:
        app.router.add_static("/static/", static_dir(), follow_symlinks=False)
        signin.add_routes(app)
        for add in PAGE_ROUTES:
            add(app)
    for mount in mounts:
        mount(app)
    served = {resource.canonical for resource in app.router.resources()}
    app[NAV_SHOWN] = [(href, label) for href, label in NAV if href in served]
    return app


class HttpServer:
    """One aiohttp server: `start` binds (port 0: a free one), `close` stops it."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
