"""The Overview's waiting times come from the answers the trace recorder timed (time to the
first visible post and to the answer shown, p50/p95), on SQLite and PostgreSQL, over HTTP."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from bots.console.sessions import SESSION_COOKIE
from bots.settings import SlackSettings
from storage.base import ConversationStore, TraceEvent
from tests.bots.console.conftest import StartConsole, console_settings
from tests.storage.conftest import (  # noqa: F401 (fixtures: both backends)
    Backend,
    backend,
    db_path,
    pg_server,
    pg_url,
)


async def answered_run(store: ConversationStore, key: str) -> int:
    channel = key.rsplit(":", 1)[0]
    conversation = await store.get_or_create_conversation(key, channel_key=channel)
    run = await store.start_run(conversation.id, user_id="U1", channel_key=channel, model="m")
    await store.finish_run(run.id, "done")  # its own duration: next to nothing
    return run.id


def cards(html: str) -> dict[str, str]:
    """The Overview's cards, label: value."""
    found = re.findall(r'<div class="value">([^<]*)</div><div class="label">([^<]*)</div>', html)
    return {label: value for value, label in found}


async def test_the_overview_shows_the_recorded_first_post_and_answer_percentiles(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
    start_console: StartConsole,
) -> None:
    settings = console_settings(tmp_path, slack=SlackSettings(admins=["UADMIN"]))
    async with backend.open() as store:
        now = await store.now()
        events = []
        for n in range(1, 21):  # answers after n s, first posts after n/10 s
            run = await answered_run(store, f"slack:T1:C1:{n}.0")
            events.append(
                TraceEvent(run, "answer", now - 60.0, 1000.0 * n, {"first_post_ms": 100.0 * n}, 1)
            )
        discord = await answered_run(store, "discord:G1:7:1")
        events.append(TraceEvent(discord, "answer", now - 60.0, 50_000.0, {}, 1))
        old = await answered_run(store, "slack:T1:C1:99.0")  # before the 30 days
        events.append(TraceEvent(old, "answer", now - 40 * 86400.0, 90_000.0, {}, 1))
        await store.append_trace_events(events)

        async with start_console(settings, store) as console:
            deps = console.deps
            _session, cookie = deps.sessions.new("slack:UADMIN", "Ada", "admin", now=deps.clock())
            async with aiohttp.ClientSession(cookies={SESSION_COOKIE: cookie}) as http:
                async with http.get(f"{console.url}/?platform=slack") as response:
                    assert response.status == 200
                    slack = await response.text()
                async with http.get(f"{console.url}/") as response:
                    everywhere = await response.text()

    shown = cards(slack)
    assert shown["first visible post, p50"] == "1.0 s"
    assert shown["first visible post, p95"] == "1.9 s"
    assert shown["time to answer, p50"] == "10.0 s"
    assert shown["time to answer, p95"] == "19.0 s"
    assert "over 20 answers shown" in slack
    shown = cards(everywhere)  # Discord's answer counts; the one before the period does not
    assert shown["time to answer, p95"] == "20.0 s"
    assert shown["first visible post, p95"] == "1.9 s"
    assert "over 21 answers shown" in everywhere
