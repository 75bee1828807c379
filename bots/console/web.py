"""What every console page shares: its dependencies, the signed-in person, rendering.

Owns: `ConsoleDeps` (the settings, the store, the runner when one runs in this process, the
sessions, the templates, the clock, an HTTP client for sign-in), `DEPS` (its key on the
aiohttp application), `session_of`, `render` (a template with the layout's context: the
person, their CSRF token, the navigation of the pages this server has), `require_admin`,
`form_of` (a change's form, bounded) and `text_shown` (direct messages' text hidden unless
`[console] show_direct_messages`).

Must not: decide who may sign in (`roles`), or write SQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from bots.console.sessions import SESSION_COOKIE, ConsoleSession, Sessions
from bots.settings import Settings
from storage.base import ConversationStore

if TYPE_CHECKING:
    import aiohttp

    from bots.runner import ConversationRunner

MAX_FORM_BYTES = 64 * 1024  # a console form: a prompt (4,000 characters) and a few fields

# The navigation, in order: (path, label). Pages add themselves here by path (the other
# pages' modules: bots.console.server.PAGE_ROUTES).
NAV: list[tuple[str, str]] = [
    ("/", "Overview"),
    ("/conversations", "Conversations"),
    ("/feedback", "Feedback"),
    ("/channels", "Channels"),
    ("/audit", "Audit log"),
    ("/health", "Health"),
]


def is_direct_message(key: str) -> bool:
    """Whether a channel or conversation key is a direct message's: Slack `slack:T…:D…`,
    Discord `discord:dm:…`."""
    parts = key.split(":")
    if parts[0] == "slack":
        return len(parts) >= 3 and parts[2].startswith("D")
    return parts[0] == "discord" and len(parts) >= 2 and parts[1] == "dm"


def text_shown(settings: Settings, key: str) -> bool:
    """What people wrote in a direct message (and notes kept there) is shown only with
    `[console] show_direct_messages`; counts and cost always are."""
    return settings.console.show_direct_messages or not is_direct_message(key)


def template_environment() -> Environment:
    """Jinja2 over the package's templates, every value escaped unless marked safe."""
    env = Environment(
        loader=PackageLoader("bots.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        enable_async=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = format_time
    env.filters["usd"] = format_usd
    return env


def format_time(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def format_usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:.4f}"


@dataclass(slots=True)
class ConsoleDeps:
    settings: Settings
    store: ConversationStore
    sessions: Sessions
    runner: ConversationRunner | None = None
    templates: Environment = field(default_factory=template_environment)
    clock: Callable[[], float] = time.time
    http: aiohttp.ClientSession | None = None  # sign-in's calls to Slack and Discord
    # Where this process was started from (`serve`, `console`): shown on Health.
    mode: str = "serve"


DEPS: web.AppKey[ConsoleDeps] = web.AppKey("console_deps", ConsoleDeps)
# NAV's entries whose page this application serves (set once its routes are added).
NAV_SHOWN: web.AppKey[list[tuple[str, str]]] = web.AppKey("console_nav", list)
SESSION_KEY: web.RequestKey[ConsoleSession] = web.RequestKey("console_session", ConsoleSession)


def deps_of(request: web.Request) -> ConsoleDeps:
    return request.app[DEPS]


def session_of(request: web.Request) -> ConsoleSession | None:
    """The signed-in person (set by the session middleware), or None."""
    return request.get(SESSION_KEY)


def read_session(request: web.Request) -> ConsoleSession | None:
    deps = deps_of(request)
    return deps.sessions.read(request.cookies.get(SESSION_COOKIE), now=deps.clock())


def render(
    request: web.Request, template: str, context: Mapping[str, Any], *, status: int = 200
) -> web.Response:
    deps = deps_of(request)
    session = session_of(request)
    page = deps.templates.get_template(template).render(
        {
            **context,
            "session": session,
            "csrf": deps.sessions.csrf_token(session) if session is not None else "",
            "nav": request.app.get(NAV_SHOWN, ()),
            "path": request.path,
        }
    )
    return web.Response(text=page, content_type="text/html", charset="utf-8", status=status)


def require_admin(request: web.Request) -> ConsoleSession:
    """The signed-in admin; a viewer (or nobody) gets 403."""
    session = session_of(request)
    if session is None or not session.can_change:
        raise web.HTTPForbidden(text="Only admins may change this; you can look.")
    return session


async def form_of(request: web.Request) -> Mapping[str, str]:
    """The request's form fields as text (the middleware already checked size and CSRF)."""
    form = await request.post()
    return {name: value for name, value in form.items() if isinstance(value, str)}


def origin_of(request: web.Request) -> str:
    """`console <ip>`: where an audited change came from."""
    return f"console {request.remote or '?'}"
