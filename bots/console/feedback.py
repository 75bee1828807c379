"""The Feedback page: runs people voted on, 👎 first, each with its conversation and trace;
an admin marks one reviewed with a note (stored, and audited as `console.feedback_review`).

Owns: `/feedback` (all, not yet reviewed, or reviewed; paged) and
`POST /feedback/{run}/review` (admins only; the server's middleware has checked the CSRF
token and origin).

Must not: write SQL (the store's contract), or change a vote.
"""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from bots.console.conversations import conversation_url
from bots.console.conversations_view import trace_step
from bots.console.web import (
    deps_of,
    form_of,
    is_direct_message,
    origin_of,
    render,
    require_admin,
)
from bots.features.audit import record_action
from storage.base import TraceEvent

__all__ = ["add_routes"]

PAGE_SIZE = 30
MAX_NOTE_CHARS = 2_000
_SHOWN = {"open": False, "reviewed": True}


async def feedback_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    shown = request.query.get("show", "")
    reviewed = _SHOWN.get(shown)
    page_text = request.query.get("page", "0")
    page = int(page_text) if page_text.isdigit() and len(page_text) < 5 else 0
    items = await deps.store.feedback_items(
        limit=PAGE_SIZE + 1, offset=page * PAGE_SIZE, reviewed=reviewed
    )
    more, items = len(items) > PAGE_SIZE, items[:PAGE_SIZE]
    events = await deps.store.run_traces([item.run_id for item in items])
    by_run: dict[int, list[TraceEvent]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    show_dm = deps.settings.console.show_direct_messages
    rows = []
    for item in items:
        hide = is_direct_message(item.conversation_key) and not show_dm
        steps = [trace_step(e, hide_text=hide) for e in by_run.get(item.run_id, [])]
        link = f"{conversation_url(item.conversation_key)}#run-{item.run_id}"
        rows.append((item, steps, link))
    query = {"show": shown} if shown in _SHOWN else {}
    return render(
        request,
        "feedback.html",
        {
            "title": "Feedback",
            "rows": rows,
            "show": shown if shown in _SHOWN else "",
            "newer": "/feedback?" + urlencode({**query, "page": page - 1}) if page else "",
            "older": "/feedback?" + urlencode({**query, "page": page + 1}) if more else "",
            "notice": "Marked reviewed." if request.query.get("done") == "1" else None,
        },
    )


async def review(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    run_text = request.match_info["run"]
    if not run_text.isdigit() or len(run_text) > 18:
        raise web.HTTPNotFound(text="No such run.")
    run_id = int(run_text)
    form = await form_of(request)
    note = " ".join(form.get("note", "").split())[:MAX_NOTE_CHARS]
    try:
        await deps.store.review_feedback(run_id, by=session.person, note=note)
    except KeyError:
        raise web.HTTPNotFound(text="No such run.") from None
    await record_action(
        deps.store,
        actor=session.person,
        action="console.feedback_review",
        target=str(run_id),
        origin=origin_of(request),
        detail={"note": note},
        secrets=deps.settings.secrets(),
    )
    raise web.HTTPSeeOther("/feedback?done=1")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/feedback", feedback_page)
    app.router.add_post("/feedback/{run}/review", review)
