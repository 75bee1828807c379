"""`/metrics`: the Prometheus text a scraper reads, counted from real runs through the runner,
served by a real aiohttp server and read back with prometheus-client's own parser."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.traces.metrics import MAX_TOOL_LABELS, TeammateMetrics
from bots.traces.recorder import TraceRecorder
from core.messages import Usage
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.console.test_traces import EchoTool
from tests.bots.runner_helpers import incoming
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces

CHANNEL = "slack:T1:C1"


async def scrape(metrics: TeammateMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    app = web.Application()
    app.router.add_get("/metrics", metrics.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    finally:
        await runner.cleanup()
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_answers_tokens_cost_and_tool_calls_are_counted_from_runs(
    store: SqliteStore, tmp_path: Path
) -> None:
    usage = Usage(input=100, output=20, cache_read=300, cache_write=40, cost=0.25)
    model = ScriptedModel(
        script=[
            Reply(tool_calls=[call("echo", {"text": "hi"})], usage=usage),
            Reply(text="done", usage=usage),
            Reply(tool_calls=[call("echo", {"text": "fail"})], usage=usage),
            Reply(text="it failed", usage=usage),
        ]
    )
    metrics = TeammateMetrics()
    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path),
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [EchoTool()],
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
        traces=TraceRecorder(store, metrics=metrics),
    )
    metrics.watch_inbox(runner.inbox_depth)
    for n in (1, 2):
        key = f"{CHANNEL}:{n}.0"
        await runner.submit(incoming(f"go {n}", key=key, channel=CHANNEL), RecordingSurface())
        await runner.wait(key)
    await runner.close()

    found = await scrape(metrics)
    assert found[("teammate_answers_total", (("outcome", "done"), ("platform", "slack")))] == 2
    assert found[("teammate_run_duration_seconds_count", (("platform", "slack"),))] == 2
    assert found[("teammate_tokens_total", (("kind", "input"),))] == 400
    assert found[("teammate_tokens_total", (("kind", "cache_read"),))] == 1200
    costs = 0.0
    for n in (1, 2):
        conversation = await store.get_conversation(f"{CHANNEL}:{n}.0")
        assert conversation is not None
        costs += sum(r.usage.cost for r in await store.conversation_runs(conversation.id, limit=5))
    assert costs > 0 and abs(found[("teammate_cost_usd_total", ())] - costs) < 1e-9
    assert found[("teammate_tool_calls_total", (("outcome", "ok"), ("tool", "echo")))] == 1
    assert found[("teammate_tool_calls_total", (("outcome", "error"), ("tool", "echo")))] == 1
    assert found[("teammate_inbox_depth", ())] == 0
    assert ("teammate_event_loop_lag_seconds_count", ()) in found


async def test_each_process_has_its_own_registry_and_tool_names_are_bounded() -> None:
    first, second = TeammateMetrics(), TeammateMetrics()  # no "Duplicated timeseries" error
    for n in range(MAX_TOOL_LABELS + 5):
        first.tool_called(f"mcp_tool_{n}", failed=False)
    found = await scrape(first)
    tools = {labels for name, labels in found if name == "teammate_tool_calls_total"}
    assert len(tools) == MAX_TOOL_LABELS + 1  # the rest count as "other"
    assert found[("teammate_tool_calls_total", (("outcome", "ok"), ("tool", "other")))] == 5
    assert not any(n == "teammate_tool_calls_total" for n, _ in await scrape(second))


def block_the_loop(seconds: float) -> None:
    time.sleep(seconds)


async def test_the_event_loop_lag_is_sampled() -> None:
    metrics = TeammateMetrics()
    sampler = asyncio.create_task(metrics.sample_loop_lag(every_s=0.01))
    slow = ("teammate_event_loop_lag_seconds_bucket", (("le", "0.1"),))
    every = ("teammate_event_loop_lag_seconds_count", ())
    try:
        await asyncio.sleep(0.05)
        block_the_loop(0.3)  # the sampler's next wake-up is late by about that much
        for _ in range(500):
            await asyncio.sleep(0.01)
            found = await scrape(metrics)
            if found[every] > found[slow]:  # a sample above 0.1 s
                break
        else:
            raise AssertionError("the blocked loop was never seen")
    finally:
        sampler.cancel()
