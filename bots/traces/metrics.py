"""The process's Prometheus metrics and the `/metrics` handler.

Owns: `TeammateMetrics`, a registry of its own per process (never prometheus-client's global
one, so two runners in one test process do not collide): answers by platform and outcome, run
duration, tokens by kind, cost, tool calls by tool and outcome, trace events lost, inbox depth
and the event loop's lag (both read when scraped or sampled); `handle` is the aiohttp handler
the console's web server mounts at `/metrics`.

Tool names are bounded: after `MAX_TOOL_LABELS` distinct ones, further tools count as
"other" (MCP servers can bring any number of tools; Prometheus keeps a series per label value).

Must not: import a platform; hold anything about one run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from core.messages import Usage

__all__ = ["MAX_TOOL_LABELS", "TeammateMetrics"]

MAX_TOOL_LABELS = 100
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_OUTCOMES = frozenset({"done", "error", "aborted", "interrupted"})


class TeammateMetrics:
    """One process's metrics. `render()` is the Prometheus text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._answers = Counter(
            "teammate_answers", "Runs finished, by platform and outcome.",
            ["platform", "outcome"], registry=r,
        )  # fmt: skip
        self._duration = Histogram(
            "teammate_run_duration_seconds", "From a run's start to its end, by platform.",
            ["platform"], buckets=_DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self._tokens = Counter(
            "teammate_tokens", "Model tokens, by kind (input, output, cache_read, cache_write).",
            ["kind"], registry=r,
        )  # fmt: skip
        self._cost = Counter("teammate_cost_usd", "Model cost in US dollars.", registry=r)
        self._tools = Counter(
            "teammate_tool_calls", "Tool calls, by tool and outcome (ok, error).",
            ["tool", "outcome"], registry=r,
        )  # fmt: skip
        self._lost = Counter(
            "teammate_trace_events_dropped", "Trace events not recorded (queue full, store down).",
            registry=r,
        )  # fmt: skip
        self._inbox = Gauge(
            "teammate_inbox_depth", "Messages accepted and waiting for a run, on this instance.",
            registry=r,
        )  # fmt: skip
        self._lag = Histogram(
            "teammate_event_loop_lag_seconds", "How late the event loop woke a sleeper.",
            buckets=_LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self._tool_names: set[str] = set()

    def run_finished(self, platform: str, outcome: str, seconds: float, usage: Usage) -> None:
        outcome = outcome if outcome in _OUTCOMES else "other"
        self._answers.labels(platform=platform[:32], outcome=outcome).inc()
        self._duration.labels(platform=platform[:32]).observe(max(0.0, seconds))
        for kind, count in (
            ("input", usage.input),
            ("output", usage.output),
            ("cache_read", usage.cache_read),
            ("cache_write", usage.cache_write),
        ):
            if count > 0:
                self._tokens.labels(kind=kind).inc(count)
        if usage.cost > 0:
            self._cost.inc(usage.cost)

    def tool_called(self, tool: str, *, failed: bool) -> None:
        name = tool[:64]
        if name not in self._tool_names:
            if len(self._tool_names) >= MAX_TOOL_LABELS:
                name = "other"
            else:
                self._tool_names.add(name)
        self._tools.labels(tool=name, outcome="error" if failed else "ok").inc()

    def traces_dropped(self, count: int) -> None:
        self._lost.inc(count)

    def watch_inbox(self, depth: Callable[[], int]) -> None:
        """Read the inbox depth from `depth` whenever the metrics are scraped."""
        self._inbox.set_function(lambda: float(depth()))

    async def sample_loop_lag(self, every_s: float = 1.0) -> None:
        """Measure the event loop's lag until cancelled (run it as a task)."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(every_s)
            self._lag.observe(max(0.0, time.monotonic() - asked - every_s))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def handle(self, request: web.Request) -> web.Response:
        """`GET /metrics`: the Prometheus text exposition."""
        del request
        response = web.Response(body=self.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response
