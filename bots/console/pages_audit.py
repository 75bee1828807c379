"""The Audit log page: every admin action from any surface, newest first, append-only.

Owns: the filters (person, action, target), paging by id (`before`), and showing an entry's
detail as written (escaped, bounded). Nothing here changes or removes an entry: the store's
tables refuse it.

Must not: write SQL (`store.audit_entries`).
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from aiohttp import web

from bots.console.web import deps_of, render, text_shown
from bots.features.audit import ACTIONS

PAGE_SIZE = 50
MAX_FILTER_CHARS = 300


def _filter(request: web.Request, name: str) -> str | None:
    value = (request.query.get(name) or "").strip()
    return value[:MAX_FILTER_CHARS] or None


async def audit_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    actor, action, target = (_filter(request, n) for n in ("actor", "action", "target"))
    before_text = request.query.get("before", "")
    before = int(before_text) if before_text.isdigit() and len(before_text) < 19 else None
    entries = await deps.store.audit_entries(
        limit=PAGE_SIZE + 1, before_id=before, actor=actor, action=action, target=target
    )
    more = len(entries) > PAGE_SIZE
    entries = entries[:PAGE_SIZE]
    filters = {k: v for k, v in (("actor", actor), ("action", action), ("target", target)) if v}
    older = "/audit?" + urlencode({**filters, "before": entries[-1].id}) if more and entries else ""
    return render(
        request,
        "audit.html",
        {
            "title": "Audit log",
            "entries": [
                (
                    entry,
                    json.dumps(entry.detail, ensure_ascii=False, indent=1)[:4000]
                    if text_shown(deps.settings, entry.target)
                    else "(hidden: a direct message's; [console] show_direct_messages)",
                )
                for entry in entries
            ],
            "actions": sorted(ACTIONS),
            "actor": actor or "",
            "action": action or "",
            "target": target or "",
            "older": older,
            "newest": "/audit?" + urlencode(filters) if before is not None else "",
        },
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/audit", audit_page)
