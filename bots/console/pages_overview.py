"""The Overview page: the last 30 days at a glance, for a platform or a channel.

Owns: the filters (platform, channel), the figures (answers, people, failures and
interruptions, 👍/👎, cost, time to the first visible post and to the answer shown p50/p95, as
the trace recorder timed them: `store.answer_timings`), the cost per day stacked by channel (the
busiest `TOP_CHANNELS`, the rest as "other"; drawn by Chart.js from a JSON block, no inline
script), and each budget against its limit today.

Must not: write SQL (`store.console_overview`, `store.answer_timings`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from aiohttp import web

from bots.console.web import deps_of, render
from bots.settings import Settings
from storage.base import AnswerTimings, ConsoleOverview

PERIOD_DAYS = 30
TOP_CHANNELS = 8
PLATFORMS = ("slack", "discord", "terminal")
MAX_CHANNEL_KEY = 200


def filters_of(request: web.Request) -> tuple[str | None, str | None]:
    """The platform and channel asked for; anything unknown or oversized is ignored."""
    platform = request.query.get("platform") or None
    if platform not in PLATFORMS:
        platform = None
    channel = (request.query.get("channel") or "").strip() or None
    if channel is not None and (len(channel) > MAX_CHANNEL_KEY or ":" not in channel):
        channel = None
    return platform, channel


def period_days(now: float, days: int = PERIOD_DAYS) -> list[str]:
    """The period's UTC days, oldest first, today last."""
    today = int(now // 86400)
    return [time.strftime("%Y-%m-%d", time.gmtime((today - n) * 86400)) for n in range(days)][::-1]


def cost_chart(overview: ConsoleOverview, days: list[str]) -> dict[str, Any]:
    """Chart.js's data: a dataset per busiest channel (and "other"), a value per day."""
    totals: dict[str, float] = defaultdict(float)
    for entry in overview.daily_cost:
        totals[entry.channel_key] += entry.cost_usd
    top = sorted(totals, key=lambda key: -totals[key])[:TOP_CHANNELS]
    series: dict[str, list[float]] = {key: [0.0] * len(days) for key in [*top, "other"]}
    index = {day: n for n, day in enumerate(days)}
    for entry in overview.daily_cost:
        n = index.get(entry.day)
        if n is not None:
            key = entry.channel_key if entry.channel_key in series else "other"
            series[key][n] += entry.cost_usd
    datasets = [
        {"label": key, "data": [round(v, 6) for v in values]}
        for key, values in series.items()
        if any(values)
    ]
    return {"labels": days, "datasets": datasets}


def seconds(ms: float | None) -> str:
    return "—" if ms is None else f"{ms / 1000.0:.1f} s"


def timing_cards(overview: ConsoleOverview, timings: AnswerTimings) -> list[tuple[str, str]]:
    """(value, label) of the waiting times: from each run's start to its first visible post
    and to its answer shown, as recorded. Without any recorded answer in the period (runs
    from before traces), the answer's figures are the runs' own durations."""
    if timings.runs:
        answer = [seconds(timings.answer_p50_ms), seconds(timings.answer_p95_ms)]
    else:
        answer = [
            seconds(None if s is None else s * 1000.0)
            for s in (overview.answer_p50_s, overview.answer_p95_s)
        ]
    return [
        (seconds(timings.first_post_p50_ms), "first visible post, p50"),
        (seconds(timings.first_post_p95_ms), "first visible post, p95"),
        (answer[0], "time to answer, p50"),
        (answer[1], "time to answer, p95"),
    ]


def budgets(settings: Settings, overview: ConsoleOverview, today: str) -> list[dict[str, Any]]:
    """Today's spend of each channel against `[budgets] channel_usd_per_day`, and the other
    limits as configured."""
    limits = settings.budgets
    rows: list[dict[str, Any]] = []
    if limits.channel_usd_per_day is not None:
        spent: dict[str, float] = defaultdict(float)
        for entry in overview.daily_cost:
            if entry.day == today:
                spent[entry.channel_key] += entry.cost_usd
        for key in sorted(spent, key=lambda k: -spent[k])[:20]:
            rows.append({"scope": key, "spent": spent[key], "limit": limits.channel_usd_per_day})
    for scope, limit in (
        ("each person", limits.user_usd_per_day),
        ("each conversation", limits.conversation_usd_per_day),
        ("each channel", limits.channel_usd_per_day),
    ):
        if limit is not None and not (scope == "each channel" and rows):
            rows.append({"scope": scope, "spent": None, "limit": limit})
    return rows


async def overview_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    platform, channel = filters_of(request)
    now = await deps.store.now()
    days = period_days(now)
    since = int(now // 86400 - (PERIOD_DAYS - 1)) * 86400.0
    overview = await deps.store.console_overview(
        since=since, platform=platform, channel_key=channel
    )
    timings = await deps.store.answer_timings(since=since, channel_key=channel, platform=platform)
    votes = overview.votes_up + overview.votes_down
    return render(
        request,
        "overview.html",
        {
            "title": "Overview",
            "o": overview,
            "platform": platform or "",
            "channel": channel or "",
            "platforms": PLATFORMS,
            "chart": cost_chart(overview, days),
            "up_rate": None if votes == 0 else overview.votes_up / votes,
            "timings": timing_cards(overview, timings),
            "timed_answers": timings.runs,
            "budgets": budgets(deps.settings, overview, days[-1]),
            "since": since,
        },
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", overview_page)
