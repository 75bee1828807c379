"""The trace recorder end to end: real runs through the runner, the real Anthropic SDK against
the fake Messages API, real tools, on SQLite and PostgreSQL; what the store holds afterwards
is what the console shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bots.app import ModelFactory
from bots.runner import ConversationRunner
from bots.settings import CompactionSettings, Settings
from bots.traces.recorder import TraceRecorder
from core.messages import AssistantMessage, Author
from core.models.scripted import Reply, ScriptedModel
from core.tools import AgentTool, ToolContext, ToolResult
from storage.base import ConversationStore, TraceEvent
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import KEY as RUNNER_KEY
from tests.bots.runner_helpers import incoming, make_runner
from tests.bots.test_runner import SMALL_WINDOW
from tests.bots.test_runner import _fill as fill_history
from tests.fakes.anthropic_server import FakeAnthropic, ToolUseOut, sse, text_reply
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.storage.conftest import (  # noqa: F401 (fixtures: both backends)
    Backend,
    backend,
    clock,
    db_path,
    pg_server,
    pg_url,
)

KEY, CHANNEL = "slack:T1:C1:1700000000.000100", "slack:T1:C1"
API_KEY = "sk-ant-test-key-traces"
SECRET = "s3cr3t-value-of-the-deployment"


class EchoParams(BaseModel):
    text: str


class EchoTool(AgentTool[EchoParams]):
    name = "echo"
    label = "Echo"
    description = "Say it back."
    parameters = EchoParams

    def summarize(self, params: EchoParams) -> str:
        return f"Echo {params.text[:20]}"

    async def execute(self, call_id: str, params: EchoParams, ctx: ToolContext) -> ToolResult:
        if params.text == "fail":
            raise RuntimeError("the echo chamber is closed")
        return ToolResult.text(f"echoed: {params.text} ({SECRET})")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=API_KEY)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def traced(backend: Backend) -> AsyncIterator[ConversationStore]:  # noqa: F811
    async with backend.open() as store:
        yield store


def tool_use(call_id: str, name: str, arguments: dict[str, Any], **usage: Any) -> Any:
    return sse(ToolUseOut(call_id, name, [json.dumps(arguments)]), stop_reason="tool_use", **usage)


async def run_once(
    store: ConversationStore, fake: FakeAnthropic, tmp_path: Path, *tools: AgentTool[Any]
) -> tuple[ConversationRunner, ModelFactory]:
    settings = Settings(
        data_dir=tmp_path,
        anthropic_api_key=API_KEY,
        anthropic_base_url=fake.url,
        system_prompt=f"Never say {SECRET}.",  # not a secret setting: masked by the recorder's
    )
    models = ModelFactory(settings)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=models,
        toolset_factory=lambda _channel: list(tools),
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
        traces=TraceRecorder(store, secrets=[SECRET, API_KEY]),
    )
    return runner, models


async def trace_of(store: ConversationStore, runner: ConversationRunner) -> list[TraceEvent]:
    await runner.traces.flushed()
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    (run,) = await store.conversation_runs(conversation.id, limit=5)
    return await store.run_traces([run.id])


async def test_a_run_with_a_tool_call_stores_its_model_and_tool_calls(
    traced: ConversationStore, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.add(
        tool_use(
            "t1",
            "echo",
            {"text": "hello"},
            input_tokens=120,
            output_tokens=30,
            cache_read=400,
            cache_write=50,
        ),
        text_reply("All done.", input_tokens=150, output_tokens=8),
    )
    runner, models = await run_once(traced, fake, tmp_path, EchoTool())
    await runner.submit(incoming("say hello", key=KEY, channel=CHANNEL), RecordingSurface())
    await runner.wait(KEY)
    events = await trace_of(traced, runner)
    await runner.close()
    await models.aclose()

    kinds = [e.kind for e in events]
    assert kinds.count("model_call") == 2 and kinds.count("tool_call") == 1
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    first, second = [e for e in events if e.kind == "model_call"]
    assert (first.data["input"], first.data["output"]) == (120, 30)
    assert (first.data["cache_read"], first.data["cache_write"]) == (400, 50)
    assert first.data["stop_reason"] == "tool_use" and second.data["stop_reason"] == "stop"
    assert first.data["cost"] > 0 and first.duration_ms is not None and first.duration_ms > 0
    (tool,) = [e for e in events if e.kind == "tool_call"]
    assert tool.data["tool"] == "echo" and tool.data["label"] == "Echo hello"
    assert json.loads(tool.data["arguments"]["text"]) == {"text": "hello"}
    assert tool.data["result"]["text"].startswith("echoed: hello")
    assert SECRET not in json.dumps([e.data for e in events])  # masked in the stored result
    assert tool.data["error"] is None and tool.duration_ms is not None
    # The surface showed the run: its first post, then its answer, timed from its start.
    (answered,) = [e for e in events if e.kind == "answer"]
    assert answered.duration_ms is not None and kinds[-1] == "answer"
    assert 0 <= answered.data["first_post_ms"] <= answered.duration_ms


async def test_a_failing_tool_stores_its_error(
    traced: ConversationStore, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.add(tool_use("t1", "echo", {"text": "fail"}), text_reply("It failed."))
    runner, models = await run_once(traced, fake, tmp_path, EchoTool())
    await runner.submit(incoming("fail please", key=KEY, channel=CHANNEL), RecordingSurface())
    await runner.wait(KEY)
    events = await trace_of(traced, runner)
    await runner.close()
    await models.aclose()
    (tool,) = [e for e in events if e.kind == "tool_call"]
    assert "the echo chamber is closed" in (tool.data["error"] or "")


async def test_a_stop_is_stored_with_who_stopped(
    traced: ConversationStore, fake: FakeAnthropic, tmp_path: Path
) -> None:
    gate = GateTool()
    fake.add(tool_use("t1", "gate", {}), text_reply("never sent"))
    runner, models = await run_once(traced, fake, tmp_path, gate)
    await runner.submit(incoming("wait", key=KEY, channel=CHANNEL), RecordingSurface())
    await asyncio.wait_for(gate.entered.wait(), 30)
    run_id = runner.current_run(KEY)
    assert runner.stop(KEY, run_id, by=Author(id="U7", name="Grace")) == "stopped"
    await runner.wait(KEY)
    events = await trace_of(traced, runner)
    await runner.close()
    await models.aclose()
    (stop,) = [e for e in events if e.kind == "stop"]
    assert (stop.data["by_id"], stop.data["by"], stop.data["scope"]) == ("U7", "Grace", "run")
    (end,) = [e for e in events if e.kind == "end"]
    assert end.data["reason"] == "aborted"


async def test_a_full_queue_drops_with_a_count_and_never_blocks(
    traced: ConversationStore, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.add(tool_use("t1", "echo", {"text": "a"}), text_reply("ok"))
    settings = Settings(data_dir=tmp_path, anthropic_api_key=API_KEY, anthropic_base_url=fake.url)
    models = ModelFactory(settings)
    recorder = TraceRecorder(traced, max_pending=2, flush_delay_s=60.0)
    runner = ConversationRunner(
        store=traced,
        settings=settings,
        model_factory=models,
        toolset_factory=lambda _channel: [EchoTool()],
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
        traces=recorder,
    )
    surface = RecordingSurface()
    await runner.submit(incoming("go", key=KEY, channel=CHANNEL), surface)
    await runner.wait(KEY)  # the answer did not wait for the writer (gathering for 60 s)
    assert recorder.dropped > 0
    await runner.close()
    await models.aclose()
    conversation = await traced.get_conversation(KEY)
    assert conversation is not None
    (run,) = await traced.conversation_runs(conversation.id, limit=5)
    assert run.outcome == "done"
    assert len(await traced.run_traces([run.id])) == 2  # what fitted was written at close


async def test_a_compaction_and_the_overflow_that_forced_it_are_stored(
    store: SqliteStore, tmp_path: Path
) -> None:
    await fill_history(store, turns=6, tokens_each=100)
    overflow = AssistantMessage(
        stop_reason="error", error_kind="context_overflow", error_message="prompt is too long"
    )
    model = ScriptedModel(
        [overflow, Reply(text="## Goal\nsummary"), Reply(text="fits now")], info=SMALL_WINDOW
    )
    compaction = CompactionSettings(reserve_tokens=500, keep_recent_tokens=200)
    runner = make_runner(store, tmp_path, model, compaction=compaction)
    await runner.submit(incoming("one more"), RecordingSurface())
    await runner.wait(RUNNER_KEY)
    await runner.traces.flushed()
    conversation = await store.get_conversation(RUNNER_KEY)
    assert conversation is not None
    (run,) = await store.conversation_runs(conversation.id, limit=5)
    events = await store.run_traces([run.id])
    await runner.close()
    first, second = [e for e in events if e.kind == "model_call"]
    assert first.data["error_kind"] == "context_overflow"
    assert "too long" in first.data["error"]
    (compacted,) = [e for e in events if e.kind == "compaction"]
    assert compacted.data["forced"] is True and compacted.data["up_to_seq"] > 0
    assert second.seq > compacted.seq > first.seq  # in the order it happened


async def test_an_unexpected_failure_is_stored_with_its_reference(
    store: SqliteStore, tmp_path: Path
) -> None:
    def broken_toolset(_channel: str) -> list[Any]:
        raise RuntimeError("the toolset is broken")

    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path),
        model_factory=lambda _id: ScriptedModel(default=Reply(text="never")),
        toolset_factory=broken_toolset,
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
    )
    surface = RecordingSurface()
    await runner.submit(incoming("hello", key=KEY, channel=CHANNEL), surface)
    await runner.wait(KEY)
    events = await trace_of(store, runner)
    await runner.close()
    (finished,) = surface.finished()
    (error,) = [e for e in events if e.kind == "error"]
    assert finished.reference is not None and error.data["reference"] == finished.reference
    assert finished.reference in (error.data["text"] or "")
