"""`/metrics` on the console's server: the process's Prometheus metrics.

Owns: `add_routes`, which, where a runner works in this process (`teammate serve`), gives its
trace recorder a `TeammateMetrics` (unless it has one), reads the inbox depth from the runner
when scraped, samples the event loop's lag while the server runs, and serves the text at
`GET /metrics` (no sign-in, like `/healthz`: the server listens on 127.0.0.1 unless told
otherwise; the figures hold no message text). `teammate console` alone has no runs to count:
no route.

Must not: hold a registry shared between processes or tests (each call makes its own).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from bots.console.web import DEPS
from bots.traces.metrics import TeammateMetrics

__all__ = ["METRICS", "add_routes"]

METRICS: web.AppKey[TeammateMetrics] = web.AppKey("console_metrics", TeammateMetrics)


def add_routes(app: web.Application) -> None:
    deps = app[DEPS]
    runner = deps.runner
    if runner is None:
        return
    metrics = runner.traces.metrics or TeammateMetrics()
    runner.traces.metrics = metrics
    metrics.watch_inbox(runner.inbox_depth)
    app[METRICS] = metrics
    app.router.add_get("/metrics", metrics.handle)
    app.cleanup_ctx.append(_sample_lag)


async def _sample_lag(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[METRICS].sample_loop_lag(), name="event-loop-lag")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
