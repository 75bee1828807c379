"""What the agent loop promises its caller and its tools, beyond the happy paths: the reason a
stop gives, the structured details of error results, the cancel signal tools see, the exact
echo limit of invalid arguments, and that a bug in the run reaches the caller."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import BaseModel

from core.events import (
    AgentEnd,
    AgentEvent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
)
from core.loop import ABORTED_TEXT, AgentContext, LoopConfig, RunControl, run_agent
from core.messages import AssistantMessage, Text, ToolResultMessage, UserMessage
from core.models.base import (
    ModelInfo,
    ModelRequest,
    Prices,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
)
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, AnyTool, ToolContext, ToolError, ToolResult
from tests.fakes.waiting_tool import WaitParams, WaitTool

INFO = ModelInfo(
    id="pinned-model-7",
    provider="pinned-provider",
    context_window=100_000,
    max_output_tokens=4_096,
    prices=Prices(input=1.0, output=2.0, cache_read=0.1, cache_write=1.0),
    supports_thinking=False,
)


class TextParams(BaseModel):
    text: str


class EchoTool(AgentTool[TextParams]):
    name = "echo"
    label = "Echo"
    description = "Echoes its text."
    parameters = TextParams

    def __init__(self) -> None:
        self.call_ids: list[str] = []

    async def execute(self, call_id: str, params: TextParams, ctx: ToolContext) -> ToolResult:
        self.call_ids.append(ctx.call_id)
        if params.text == "fail":
            raise ToolError("asked to fail", details={"asked": True})
        if params.text == "crash":
            raise OSError("disk on fire")
        return ToolResult.text(params.text, details={"length": len(params.text)})


class SlowTool(AgentTool[WaitParams]):
    name = "slow"
    label = "Slow"
    description = "Outlives its timeout."
    parameters = WaitParams
    timeout_s = 0.05

    async def execute(self, call_id: str, params: WaitParams, ctx: ToolContext) -> ToolResult:
        await asyncio.Event().wait()
        return ToolResult.text("never")


def context(*tools: AnyTool) -> AgentContext:
    return AgentContext("You are a test.", [UserMessage(content="go")], list(tools))


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def end_of(events: list[AgentEvent]) -> AgentEnd:
    last = events[-1]
    assert isinstance(last, AgentEnd)
    return last


def results_of(events: list[AgentEvent]) -> list[ToolResultMessage]:
    return [
        e.message
        for e in events
        if isinstance(e, MessageEnd) and isinstance(e.message, ToolResultMessage)
    ]


async def run_until_tool_starts_then_cancel(
    tool: WaitTool, control: RunControl, reason: str | None, *calls: Any
) -> list[AgentEvent]:
    model = ScriptedModel([Reply(tool_calls=list(calls))], info=INFO)
    events: list[AgentEvent] = []

    async def consume() -> None:
        async for event in run_agent(context(tool, EchoTool()), model, control=control):
            events.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(tool.started.wait(), 5)
    if reason is None:
        control.cancel()
    else:
        control.cancel(reason)
    await asyncio.wait_for(consumer, 5)
    return events


async def test_a_running_tool_sees_the_cancel_signal_and_the_reason() -> None:
    tool = WaitTool()
    control = RunControl()
    await run_until_tool_starts_then_cancel(tool, control, "Stopped by Bob.", call("wait"))
    assert tool.saw == [(True, "Stopped by Bob.")]


async def test_the_stop_reason_is_what_the_run_ends_with_and_what_is_stored() -> None:
    tool = WaitTool()
    events = await run_until_tool_starts_then_cancel(
        tool, RunControl(), "Stopped by Bob.", call("wait")
    )
    end = end_of(events)
    assert end.reason == "aborted" and end.error_message == "Stopped by Bob."
    aborted = end.messages[-1]
    assert isinstance(aborted, AssistantMessage)
    assert aborted.stop_reason == "aborted" and aborted.error_message == "Stopped by Bob."
    # Made by the loop, yet attributed to the model the run used.
    assert (aborted.model, aborted.provider) == ("pinned-model-7", "pinned-provider")


async def test_a_stop_without_a_reason_says_it_was_on_request() -> None:
    tool = WaitTool()
    events = await run_until_tool_starts_then_cancel(tool, RunControl(), None, call("wait"))
    assert end_of(events).error_message == ABORTED_TEXT == "Stopped on request."
    assert tool.saw == [(True, "Stopped on request.")]


async def test_calls_stopped_mid_run_are_marked_cancelled_and_finished_ones_keep_their_result() -> (
    None
):
    tool = WaitTool()
    events = await run_until_tool_starts_then_cancel(
        tool, RunControl(), "stop", call("echo", {"text": "quick"}), call("wait")
    )
    quick, stopped = results_of(events)
    assert not quick.is_error and quick.details == {"length": 5}
    assert stopped.is_error and stopped.details == {"cancelled": True}
    [text] = stopped.content
    assert isinstance(text, Text) and "stopped before this tool finished" in text.text


async def test_error_results_carry_structured_details_saying_why() -> None:
    script = [
        Reply(
            tool_calls=[
                call("nope"),
                call("echo", {"wrong": 1}),
                call("echo", {"text": "fail"}),
                call("slow"),
            ]
        ),
        Reply(text="understood"),
    ]
    events = await collect(run_agent(context(EchoTool(), SlowTool()), ScriptedModel(script)))
    unknown, invalid, refused, timed_out = results_of(events)
    assert all(r.is_error for r in (unknown, invalid, refused, timed_out))
    assert unknown.details == {"reason": "unknown_tool"}
    assert "Available tools: echo, slow." in unknown.text()
    assert invalid.details == {"reason": "invalid_arguments"}
    assert refused.details == {"asked": True} and refused.text() == "asked to fail"
    assert timed_out.details == {"reason": "timeout", "timeout_s": 0.05}
    assert "timed out after 0.05 s" in timed_out.text()
    assert end_of(events).reason == "stop"


async def test_calls_of_a_reply_cut_off_by_the_limit_are_refused_with_the_reason() -> None:
    script = [
        Reply(tool_calls=[call("echo", {"text": "x" * 50})], stop_reason="length"),
        Reply(text="again, shorter"),
    ]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    [refused] = results_of(events)
    assert refused.is_error and refused.details == {"reason": "length"}
    [end] = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert (end.tool_name, end.result) == ("echo", refused)
    assert "output token limit" in refused.text()


def echoed_arguments(result: ToolResultMessage) -> str:
    [line] = [
        line for line in result.text().splitlines() if line.startswith("Arguments received: ")
    ]
    return line.removeprefix("Arguments received: ")


@pytest.mark.parametrize("size", [1_999, 2_000, 2_001, 5_000])
async def test_invalid_arguments_are_echoed_up_to_two_thousand_characters(size: int) -> None:
    # {"text": 1, "pad": "xxx…"} serialises to exactly `size` characters
    arguments: dict[str, Any] = {"text": 1, "pad": ""}
    arguments["pad"] = "x" * (size - len(json.dumps(arguments)))
    serialised = json.dumps(arguments)
    assert len(serialised) == size
    script = [Reply(tool_calls=[call("echo", arguments)]), Reply(text="ok")]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    [result] = results_of(events)

    echoed = echoed_arguments(result)
    if size <= 2_000:
        assert echoed == serialised
    else:
        assert echoed == serialised[:2_000] + "…"


async def test_a_bug_in_the_run_reaches_the_caller_after_the_run_ends() -> None:
    # A caller's mistake the loop cannot turn into an observation for the model.
    config = LoopConfig(max_turns=cast(Any, "three"))
    events: list[AgentEvent] = []
    with pytest.raises(TypeError):
        async for event in run_agent(context(), ScriptedModel([Reply(text="hi")]), config=config):
            events.append(event)
    assert [event.type for event in events] == ["agent_start", "agent_end"]


async def test_tool_activity_is_announced_before_any_result_for_each_call() -> None:
    script = [Reply(tool_calls=[call("echo", {"text": "a"}), call("nope")]), Reply(text="done")]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    starts = [e.tool_name for e in events if isinstance(e, ToolExecutionStart)]
    assert starts == ["echo", "nope"]


class NestedParams(BaseModel):
    class Inner(BaseModel):
        count: int

    inner: Inner


class NestedTool(AgentTool[NestedParams]):
    name = "nested"
    label = "Nested"
    description = "Has nested parameters."
    parameters = NestedParams

    async def execute(self, call_id: str, params: NestedParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("ok")


class RaisingModel:
    """A model that breaks its contract: raises instead of returning an error reply."""

    info = INFO

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise ConnectionResetError("socket closed")
        yield  # an async generator


class EndlessModel:
    """A model that breaks its contract: its stream ends without a final message."""

    info = INFO

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield StreamStart(partial=AssistantMessage(model=INFO.id, provider=INFO.provider))


async def test_a_model_that_raises_gives_an_error_reply_and_a_logged_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="core.loop"):
        events = await collect(run_agent(context(), RaisingModel()))
    end = end_of(events)
    assert end.reason == "error"
    assert end.error_message == "The model failed unexpectedly (ConnectionResetError)."
    [reply] = end.messages
    assert isinstance(reply, AssistantMessage) and reply.stop_reason == "error"
    assert (reply.model, reply.provider, reply.error_kind) == (
        "pinned-model-7",
        "pinned-provider",
        "other",
    )
    [record] = caplog.records
    assert record.getMessage() == "model pinned-model-7 raised instead of returning an error"
    assert record.exc_info is not None


async def test_a_reply_without_a_final_message_ends_the_run_with_an_error() -> None:
    events = await collect(run_agent(context(), EndlessModel()))
    end = end_of(events)
    assert end.reason == "error"
    assert end.error_message == "The model's reply ended without a final message."
    [reply] = end.messages
    assert isinstance(reply, AssistantMessage) and reply.provider == "pinned-provider"
    starts = [e for e in events if e.type == "message_start"]
    assert len(starts) == len([e for e in events if e.type == "message_end"]) == 1


async def test_a_raising_tool_is_logged_with_its_name_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = [Reply(tool_calls=[call("echo", {"text": "crash"})]), Reply(text="I see")]
    with caplog.at_level(logging.WARNING, logger="core.loop"):
        events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    [result] = results_of(events)
    assert result.is_error and result.text() == "Tool 'echo' failed: OSError: disk on fire"
    [record] = caplog.records
    assert record.getMessage() == "tool echo raised" and record.exc_info is not None


async def test_tools_are_told_their_call_id_and_every_end_has_a_duration() -> None:
    tool = EchoTool()
    first, second = call("echo", {"text": "a"}), call("echo", {"text": "b"})
    script = [Reply(tool_calls=[first, second, call("nope")]), Reply(text="done")]
    events = await collect(run_agent(context(tool), ScriptedModel(script)))
    assert sorted(tool.call_ids) == sorted([first.id, second.id])
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert len(ends) == 3
    assert sorted(end.tool_name for end in ends) == ["echo", "echo", "nope"]
    for end in ends:
        assert isinstance(end.duration_s, float) and end.duration_s >= 0
        assert isinstance(end.result, ToolResultMessage)
        assert end.result.tool_call_id == end.tool_call_id


async def test_each_turn_end_names_its_turn_and_the_results_it_produced() -> None:
    failing = AssistantMessage(stop_reason="error", error_kind="other", error_message="boom")
    script: list[Reply | AssistantMessage] = [
        Reply(tool_calls=[call("echo", {"text": "a"})]),
        failing,
    ]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    first, second = [e for e in events if isinstance(e, TurnEnd)]
    assert first.turn == 1 and [r.text() for r in first.tool_results] == ["a"]
    assert [c.name for c in first.message.tool_calls()] == ["echo"]  # the reply that asked
    assert second.turn == 2 and second.tool_results == [] and second.message.stop_reason == "error"


async def test_a_stop_during_tools_keeps_prepared_errors_and_reports_every_call() -> None:
    tool = WaitTool()
    events = await run_until_tool_starts_then_cancel(
        tool, RunControl(), "stop", call("nope"), call("echo", {"text": "quick"}), call("wait")
    )
    unknown, quick, stopped = results_of(events)
    assert unknown.details == {"reason": "unknown_tool"}
    assert quick.text() == "quick" and stopped.details == {"cancelled": True}
    ends = {e.tool_name: e.result for e in events if isinstance(e, ToolExecutionEnd)}
    assert ends["wait"] is stopped
    [turn_end] = [e for e in events if isinstance(e, TurnEnd)]
    assert turn_end.turn == 1 and turn_end.tool_results == [unknown, quick, stopped]
    starts = [e for e in events if e.type == "message_start"]
    assert len(starts) == len([e for e in events if e.type == "message_end"])


async def test_a_stop_while_streaming_keeps_what_was_already_shown() -> None:
    model = ScriptedModel(
        [Reply(text="a long answer " * 20, chunk_size=4, chunk_delay_s=0.01)], info=INFO
    )
    control = RunControl()
    events: list[AgentEvent] = []
    async for event in run_agent(context(), model, control=control):
        events.append(event)
        if event.type == "message_update" and len(events) == 6:
            control.cancel("Stopped by Ada.")
    [aborted] = end_of(events).messages
    assert isinstance(aborted, AssistantMessage)
    assert aborted.text().startswith("a long") and aborted.error_message == "Stopped by Ada."
    assert [e.type for e in events].count("message_start") == 1


async def test_an_invalid_nested_argument_is_named_by_its_path() -> None:
    script = [Reply(tool_calls=[call("nested", {"inner": {"count": "x"}})]), Reply(text="ok")]
    events = await collect(run_agent(context(NestedTool()), ScriptedModel(script)))
    [result] = results_of(events)
    assert "  - inner.count: Input should be a valid integer" in result.text()


async def test_a_plain_reply_ends_its_turn_with_no_results() -> None:
    events = await collect(run_agent(context(), ScriptedModel([Reply(text="hello")])))
    [turn_end] = [e for e in events if isinstance(e, TurnEnd)]
    assert turn_end.turn == 1 and turn_end.tool_results == []
    assert end_of(events).reason == "stop"


class BadLabelTool(EchoTool):
    name = "badlabel"

    def summarize(self, params: TextParams) -> str:
        raise ValueError("cannot describe")


async def test_a_call_cut_off_by_the_limit_is_announced_with_its_id_arguments_and_name() -> None:
    script = [
        Reply(tool_calls=[call("echo", {"text": "x"}, id="cut-1")], stop_reason="length"),
        Reply(text="again"),
    ]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    [start] = [e for e in events if isinstance(e, ToolExecutionStart)]
    assert (start.tool_call_id, start.tool_name, start.arguments, start.label) == (
        "cut-1",
        "echo",
        {"text": "x"},
        "echo",
    )


async def test_an_unknown_tool_with_no_tools_at_all_says_none_are_available() -> None:
    script = [Reply(tool_calls=[call("nope", id="u-1")]), Reply(text="ok")]
    events = await collect(run_agent(context(), ScriptedModel(script)))
    [result] = results_of(events)
    assert "Available tools: none." in result.text()
    [end] = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert (end.tool_call_id, end.result, end.duration_s) == ("u-1", result, 0.0)  # never ran


async def test_a_tool_that_cannot_describe_its_call_is_labelled_by_name_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = [Reply(tool_calls=[call("badlabel", {"text": "hi"})]), Reply(text="ok")]
    events = await collect(run_agent(context(BadLabelTool()), ScriptedModel(script)))
    [start] = [e for e in events if isinstance(e, ToolExecutionStart)]
    assert start.label == "badlabel"
    [record] = [r for r in caplog.records if "could not describe" in r.getMessage()]
    assert record.getMessage() == "tool badlabel could not describe a call"
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert [r.text() for r in results_of(events)] == ["hi"]


class StalledModel:
    """A model that has not said anything yet (a slow first token)."""

    info = INFO

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.asked.set()
        await asyncio.Event().wait()
        yield StreamStart(partial=AssistantMessage(model=INFO.id, provider=INFO.provider))


async def test_a_stop_before_the_first_token_ends_with_an_empty_aborted_reply() -> None:
    model = StalledModel()
    control = RunControl()
    events: list[AgentEvent] = []

    async def consume() -> None:
        async for event in run_agent(context(), cast(Any, model), control=control):
            events.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(model.asked.wait(), 5)
    control.cancel("Stopped by Ada.")
    await asyncio.wait_for(consumer, 5)

    end = end_of(events)
    assert end.reason == "aborted"
    [aborted] = end.messages
    assert isinstance(aborted, AssistantMessage)
    assert (aborted.stop_reason, aborted.error_kind, aborted.error_message) == (
        "aborted",
        "aborted",
        "Stopped by Ada.",
    )
    assert (aborted.model, aborted.text()) == (INFO.id, "")


def test_messages_never_delivered_are_handed_back_steering_first_and_only_once() -> None:
    control = RunControl()
    later = UserMessage(content="when you are done")
    now = UserMessage(content="right now")
    control.follow_up(later)
    control.steer(now)
    assert control.take_pending() == [now, later]
    assert control.take_pending() == []


class WhereParams(BaseModel):
    pass


class WhereTool(AgentTool[WhereParams]):
    name = "where"
    label = "Where"
    description = "Says where it works."
    parameters = WhereParams

    async def execute(self, call_id: str, params: WhereParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(str(ctx.workspace))


async def test_without_a_config_tools_work_in_the_current_directory() -> None:
    script = [Reply(tool_calls=[call("where")]), Reply(text="ok")]
    events = await collect(run_agent(context(WhereTool()), ScriptedModel(script)))
    assert [r.text() for r in results_of(events)] == [str(Path.cwd())]


class LongLabelTool(EchoTool):
    name = "longlabel"

    def summarize(self, params: TextParams) -> str:
        return params.text


@pytest.mark.parametrize(("size", "shown"), [(120, 120), (121, 120)])
async def test_a_label_of_up_to_120_characters_is_shown_whole(size: int, shown: int) -> None:
    text = "y" * size
    script = [Reply(tool_calls=[call("longlabel", {"text": text})]), Reply(text="ok")]
    events = await collect(run_agent(context(LongLabelTool()), ScriptedModel(script)))
    [start] = [e for e in events if isinstance(e, ToolExecutionStart)]
    assert len(start.label) == shown
    assert start.label == text if size <= 120 else start.label == "y" * 119 + "…"


async def test_a_reply_the_model_itself_ended_aborted_ends_the_run_aborted_not_failed() -> None:
    # e.g. a model that noticed the stop first: the run reads as stopped, and its calls never run.
    tool = EchoTool()
    script = [
        Reply(
            tool_calls=[call("echo", {"text": "a"})],
            stop_reason="aborted",
            error_message="Stopped by Cy.",
        ),
        Reply(text="never asked"),
    ]
    events = await collect(run_agent(context(tool), ScriptedModel(script)))
    end = end_of(events)
    assert end.reason == "aborted"
    assert tool.call_ids == [] and results_of(events) == []
    [reply] = end.messages
    assert isinstance(reply, AssistantMessage)
    assert (reply.stop_reason, reply.error_message) == ("aborted", "Stopped by Cy.")


class WhereRunsTool(WaitTool):
    """A waiting tool that also notes the task it runs in (not the run's own task)."""

    def __init__(self) -> None:
        super().__init__()
        self.task: asyncio.Task[Any] | None = None

    async def execute(self, call_id: str, params: WaitParams, ctx: ToolContext) -> ToolResult:
        self.task = asyncio.current_task()
        return await super().execute(call_id, params, ctx)


async def test_a_cancel_from_outside_the_control_ends_the_run_cancelled_for_the_event_loop() -> (
    None
):
    # As at shutdown (asyncio.run cancels every task): the run's task must end cancelled so
    # whoever cancelled it can finish, while the caller still gets an aborted end and no error.
    tool = WhereRunsTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")])], info=INFO)
    events: list[AgentEvent] = []
    before = asyncio.all_tasks()

    async def consume() -> None:
        async for event in run_agent(context(tool), model):
            events.append(event)

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(tool.started.wait(), 5)
    [run_task] = asyncio.all_tasks() - before - {consumer, tool.task}
    run_task.cancel()
    await asyncio.wait_for(consumer, 5)  # no exception for the caller

    assert run_task.cancelled()
    end = end_of(events)
    assert end.reason == "aborted"
    assert tool.saw == [(False, None)]  # the tool was cancelled, though no one asked for a stop


class NoStartModel(ScriptedModel):
    """A model that streams text without announcing the message first (no `StreamStart`)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        partial = AssistantMessage(model=INFO.id, provider=INFO.provider, content=[Text(text="")])
        for chunk in ("Hel", "lo"):
            block = partial.content[0]
            assert isinstance(block, Text)
            block.text += chunk
            yield TextDelta(partial=partial, index=0, delta=chunk)
        yield StreamEnd(message=partial.model_copy(update={"stop_reason": "stop"}))


async def test_a_reply_streamed_without_a_start_is_still_started_once_before_its_text() -> None:
    events = await collect(run_agent(context(), NoStartModel([], info=INFO)))
    shown = [e for e in events if isinstance(e, MessageStart | MessageUpdate | MessageEnd)]
    kinds = [e.type for e in shown]
    assert kinds[-4:] == ["message_start", "message_update", "message_update", "message_end"]
    started = shown[-4]
    assert isinstance(started, MessageStart) and started.message.text() == "Hello"
    assert end_of(events).reason == "stop"


async def test_each_update_carries_the_message_being_streamed_for_surfaces_to_show() -> None:
    # A surface that edits the reply in place shows `update.message`, the partial reply so far.
    script = [Reply(text="one two three four", chunk_size=4)]
    events = await collect(run_agent(context(), ScriptedModel(script)))
    [started] = [e for e in events if isinstance(e, MessageStart) and e.message.role != "user"]
    updates = [e for e in events if isinstance(e, MessageUpdate)]
    assert len(updates) == 5
    assert all(update.message is started.message for update in updates)
    assert updates[-1].message.text() == "one two three four"


async def test_a_tool_that_raises_gives_an_error_with_no_structured_details() -> None:
    # Only a refusal (ToolError) or a timeout says why in `details`; a crash has nothing to add.
    script = [Reply(tool_calls=[call("echo", {"text": "crash"})]), Reply(text="ok")]
    events = await collect(run_agent(context(EchoTool()), ScriptedModel(script)))
    [crashed] = results_of(events)
    assert crashed.is_error and crashed.details is None
    assert crashed.text() == "Tool 'echo' failed: OSError: disk on fire"


async def test_a_run_that_hits_the_turn_limit_says_so_and_how_to_go_on() -> None:
    script = [Reply(tool_calls=[call("echo", {"text": str(n)})]) for n in range(3)]
    events = await collect(
        run_agent(context(EchoTool()), ScriptedModel(script), config=LoopConfig(max_turns=2))
    )
    end = end_of(events)
    assert end.reason == "turn_limit"
    assert end.error_message == (
        "I stopped after 2 steps in one go (the turn limit). "
        "Tell me to continue if you want me to keep going."
    )


async def test_the_configured_output_limit_is_what_the_model_is_asked_for() -> None:
    model = ScriptedModel([Reply(text="short")])
    await collect(run_agent(context(), model, config=LoopConfig(max_tokens=1_234)))
    assert [request.max_tokens for request in model.requests] == [1_234]


class ProgressTool(EchoTool):
    name = "progress"

    async def execute(self, call_id: str, params: TextParams, ctx: ToolContext) -> ToolResult:
        ctx.on_update(ToolResult.text(f"halfway: {params.text}"))
        return ToolResult.text("done")


async def test_a_tools_progress_is_shown_under_its_call_and_its_name() -> None:
    script = [Reply(tool_calls=[call("progress", {"text": "a"}, id="c-1")]), Reply(text="ok")]
    events = await collect(run_agent(context(ProgressTool()), ScriptedModel(script)))
    [update] = [e for e in events if isinstance(e, ToolExecutionUpdate)]
    assert (update.tool_call_id, update.tool_name) == ("c-1", "progress")
    assert update.partial.content == [Text(text="halfway: a")]
