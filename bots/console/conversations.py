"""The Conversations page and a conversation's page.

Owns: `/conversations` (filter by platform, channel, person, date, outcome and feedback;
full-text search; newest first, paged by `(updated_at, id)`), and `/conversations/{key}`:
the thread as people saw it, then each run (newest first) with its trace — model calls, tool
calls with arguments and results (expandable), steering, stops and who stopped, compaction,
errors with their reference — and a link to the Slack or Discord thread. A direct message's
text (messages, tool arguments and results) is hidden unless `[console] show_direct_messages`;
its counts, cost and timings are shown.

Must not: write SQL (the store's contract), or mark anything safe in a template.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from aiohttp import web

from bots.console.conversations_view import (
    HIDDEN,
    OUTCOMES,
    read_filter,
    thread_lines,
    thread_link,
    trace_step,
)
from bots.console.web import deps_of, is_direct_message, render
from storage.base import ConversationSummary, RunRecord, TraceEvent

__all__ = ["add_routes", "conversation_url"]

PAGE_SIZE = 50
MESSAGES_SHOWN = 300  # the newest; older ones are the thread's
RUNS_SHOWN = 30
SEARCH_HITS = 20
_FILTER_NAMES = ("platform", "channel", "person", "outcome", "feedback", "since", "until", "q")


def conversation_url(key: str) -> str:
    return "/conversations/" + quote(key, safe="")


def _before(query: str) -> tuple[float, int] | None:
    at, _, last = query.partition("_")
    try:
        return float(at), int(last)
    except ValueError:
        return None


async def conversations_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    wanted = read_filter(request.query)
    before = _before(request.query.get("before", "")[:64])
    rows: list[ConversationSummary] = await deps.store.console_conversations(
        wanted, limit=PAGE_SIZE + 1, before=before
    )
    more, rows = len(rows) > PAGE_SIZE, rows[:PAGE_SIZE]
    shown = {n: request.query.get(n, "")[:300] for n in _FILTER_NAMES}
    kept = {n: v for n, v in shown.items() if v}
    older = ""
    if more and rows:
        older = "/conversations?" + urlencode(
            {**kept, "before": f"{rows[-1].updated_at!r}_{rows[-1].id}"}
        )
    hits = []
    show_dm = deps.settings.console.show_direct_messages
    if wanted.search:
        found = await deps.store.search_messages(
            wanted.search, limit=SEARCH_HITS, channel_key=wanted.channel_key
        )
        hits = [
            (hit, HIDDEN if is_direct_message(hit.conversation_key) and not show_dm else hit.text)
            for hit in found
        ]
    return render(
        request,
        "conversations.html",
        {
            "title": "Conversations",
            "rows": [(row, conversation_url(row.key), is_direct_message(row.key)) for row in rows],
            "hits": [(hit, text, conversation_url(hit.conversation_key)) for hit, text in hits],
            "filters": shown,
            "outcomes": OUTCOMES,
            "older": older,
            "newest": "/conversations?" + urlencode(kept) if before is not None else "",
        },
    )


async def conversation_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    key = request.match_info["key"][:500]
    conversation = await deps.store.get_conversation(key)
    if conversation is None:
        raise web.HTTPNotFound(text="No such conversation.")
    hide = is_direct_message(key) and not deps.settings.console.show_direct_messages
    count = await deps.store.message_count(conversation.id)
    messages = await deps.store.messages_after(conversation.id, max(0, count - MESSAGES_SHOWN))
    runs: list[RunRecord] = await deps.store.conversation_runs(conversation.id, limit=RUNS_SHOWN)
    events = await deps.store.run_traces([run.id for run in runs])
    by_run: dict[int, list[TraceEvent]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    return render(
        request,
        "conversation.html",
        {
            "title": conversation.title or "Conversation",
            "conversation": conversation,
            "hidden": hide,
            "link": thread_link(key),
            "lines": thread_lines(messages, hide_text=hide),
            "older_messages": max(0, count - MESSAGES_SHOWN),
            "runs": [
                (run, [trace_step(e, hide_text=hide) for e in by_run.get(run.id, [])])
                for run in runs
            ],
        },
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/conversations", conversations_page)
    app.router.add_get("/conversations/{key}", conversation_page)
