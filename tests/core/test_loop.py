"""The agent loop's behaviour, driven by ScriptedModel: what a caller and a model observe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
from pydantic import BaseModel, Field

from core.events import (
    AgentEnd,
    AgentEvent,
    MessageEnd,
    ToolExecutionEnd,
    ToolExecutionUpdate,
)
from core.history import repair_history
from core.loop import AgentContext, LoopConfig, RunControl, run_agent
from core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ExecutionMode, ToolContext, ToolError, ToolResult


class SleepParams(BaseModel):
    seconds: float = Field(ge=0)
    tag: str = ""


class SleepTool(AgentTool[SleepParams]):
    """Sleeps, records when it started and ended, and answers with its tag."""

    name = "sleep"
    label = "Sleep"
    description = "Sleep for a while."
    parameters = SleepParams

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []

    async def execute(self, call_id: str, params: SleepParams, ctx: ToolContext) -> ToolResult:
        self.started.append(params.tag)
        ctx.on_update(ToolResult.text(f"sleeping {params.tag}"))
        try:
            await asyncio.sleep(params.seconds)
        except asyncio.CancelledError:
            self.cancelled.append(params.tag)
            raise
        self.finished.append(params.tag)
        return ToolResult.text(f"slept {params.tag}", details={"tag": params.tag})


class SequentialSleepTool(SleepTool):
    name = "sleep_seq"
    execution_mode: ClassVar[ExecutionMode] = "sequential"


class EmptyParams(BaseModel):
    pass


class BoomTool(AgentTool[EmptyParams]):
    name = "boom"
    label = "Boom"
    description = "Always fails."
    parameters = EmptyParams

    async def execute(self, call_id: str, params: EmptyParams, ctx: ToolContext) -> ToolResult:
        raise RuntimeError("disk on fire")


class RefuseTool(AgentTool[EmptyParams]):
    name = "refuse"
    label = "Refuse"
    description = "Fails the way tools are meant to."
    parameters = EmptyParams

    async def execute(self, call_id: str, params: EmptyParams, ctx: ToolContext) -> ToolResult:
        raise ToolError("that file does not exist", details={"path": "x"})


class SlowTool(AgentTool[EmptyParams]):
    name = "slow"
    label = "Slow"
    description = "Takes longer than its timeout."
    parameters = EmptyParams
    timeout_s = 0.1

    async def execute(self, call_id: str, params: EmptyParams, ctx: ToolContext) -> ToolResult:
        await asyncio.sleep(5)
        return ToolResult.text("never")


class TypedParams(BaseModel):
    path: str
    count: int
    mode: str = "r"


class TypedTool(AgentTool[TypedParams]):
    name = "typed"
    label = "Typed"
    description = "Has typed parameters."
    parameters = TypedParams

    async def execute(self, call_id: str, params: TypedParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("ok")


def context(*tools: AgentTool[BaseModel], messages: list[Message] | None = None) -> AgentContext:
    return AgentContext(
        system_prompt="You are a test.",
        messages=messages if messages is not None else [UserMessage(content="go")],
        tools=list(tools),
    )


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def types(events: list[AgentEvent]) -> list[str]:
    return [event.type for event in events]


def results_of(events: list[AgentEvent]) -> list[ToolResultMessage]:
    return [
        e.message
        for e in events
        if isinstance(e, MessageEnd) and isinstance(e.message, ToolResultMessage)
    ]


def end_of(events: list[AgentEvent]) -> AgentEnd:
    last = events[-1]
    assert isinstance(last, AgentEnd)
    return last


def assert_replayable(history: list[Message]) -> None:
    """What a provider demands: no errored/aborted replies, every call answered right after."""
    sent = repair_history(history)
    assert sent == [m for m in sent]  # a list of messages
    for index, message in enumerate(sent):
        if isinstance(message, AssistantMessage):
            assert message.stop_reason not in ("error", "aborted")
            calls = message.tool_calls()
            following = sent[index + 1 : index + 1 + len(calls)]
            assert [r.tool_call_id for r in following if isinstance(r, ToolResultMessage)] == [
                c.id for c in calls
            ]
    # Repair must add nothing for a history the loop left behind.
    assert len(sent) == len([m for m in history if not _dropped(m)])


def _dropped(message: Message) -> bool:
    return isinstance(message, AssistantMessage) and message.stop_reason in ("error", "aborted")


async def test_text_reply_event_order() -> None:
    model = ScriptedModel([Reply(text="Hello there", chunk_size=5)])
    events = await collect(run_agent(context(), model))
    assert types(events) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_update",
        "message_update",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    end = end_of(events)
    assert end.reason == "stop"
    assert len(end.messages) == 1
    reply = end.messages[0]
    assert isinstance(reply, AssistantMessage)
    assert reply.text() == "Hello there"
    assert reply.stop_reason == "stop"
    assert reply.usage.cost > 0
    # The model was sent the system prompt, the history and no tools.
    assert model.requests[0].system_prompt == "You are a test."
    assert [m.role for m in model.requests[0].messages] == ["user"]


async def test_tool_round_trip_event_order() -> None:
    tool = SleepTool()
    first = call("sleep", {"seconds": 0, "tag": "a"})
    model = ScriptedModel(
        [
            Reply(text="Let me", tool_calls=[first], chunk_size=100),
            Reply(text="Done", chunk_size=100),
        ]
    )
    events = await collect(run_agent(context(tool), model))
    assert types(events) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_update",  # text
        "message_update",  # tool-call arguments
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "message_start",  # the tool result
        "message_end",
        "turn_end",
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    update = next(e for e in events if isinstance(e, ToolExecutionUpdate))
    assert update.partial.content[0].text == "sleeping a"  # type: ignore[union-attr]
    [result] = results_of(events)
    assert result.tool_call_id == first.id and not result.is_error
    assert result.details == {"tag": "a"}
    # The second request carries the call and its result, in that order.
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool_result"]
    assert [m.role for m in end_of(events).messages] == ["assistant", "tool_result", "assistant"]


async def test_parallel_tools_overlap_and_keep_model_order() -> None:
    tool = SleepTool()
    calls = [
        call("sleep", {"seconds": 0.3, "tag": "a"}),
        call("sleep", {"seconds": 0.3, "tag": "b"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    started = time.monotonic()
    events = await collect(run_agent(context(tool), model))
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 0.55, f"two 0.3 s tools took {elapsed:.2f} s together"
    assert [r.tool_call_id for r in results_of(events)] == [c.id for c in calls]


async def test_results_follow_model_order_not_completion_order() -> None:
    tool = SleepTool()
    calls = [
        call("sleep", {"seconds": 0.2, "tag": "slow"}),
        call("sleep", {"seconds": 0, "tag": "fast"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    events = await collect(run_agent(context(tool), model))
    completion = [e.tool_call_id for e in events if isinstance(e, ToolExecutionEnd)]
    assert completion == [calls[1].id, calls[0].id]
    assert [r.tool_call_id for r in results_of(events)] == [calls[0].id, calls[1].id]
    assert [m.role for m in model.requests[1].messages][-2:] == ["tool_result", "tool_result"]


async def test_one_sequential_tool_makes_the_batch_sequential() -> None:
    parallel, sequential = SleepTool(), SequentialSleepTool()
    calls = [
        call("sleep", {"seconds": 0.2, "tag": "a"}),
        call("sleep_seq", {"seconds": 0.2, "tag": "b"}),
        call("sleep", {"seconds": 0.2, "tag": "c"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    started = time.monotonic()
    events = await collect(run_agent(context(parallel, sequential), model))
    assert time.monotonic() - started >= 0.6
    assert parallel.finished == ["a", "c"] and sequential.finished == ["b"]
    ends = [e.tool_call_id for e in events if isinstance(e, ToolExecutionEnd)]
    assert ends == [c.id for c in calls]


async def test_unknown_tool_is_an_observation() -> None:
    model = ScriptedModel(
        [Reply(tool_calls=[call("teleport", {"to": "mars"})]), Reply(text="sorry")]
    )
    events = await collect(run_agent(context(SleepTool()), model))
    [result] = results_of(events)
    assert result.is_error
    assert "Tool 'teleport' is not available here" in result.text()
    assert "not enabled in this conversation" in result.text()
    assert "sleep" in result.text()
    assert end_of(events).reason == "stop"


async def test_invalid_arguments_name_each_field_and_echo_arguments() -> None:
    bad = {"count": "many", "mode": 3}
    model = ScriptedModel([Reply(tool_calls=[call("typed", bad)]), Reply(text="fixed")])
    events = await collect(run_agent(context(TypedTool()), model))
    [result] = results_of(events)
    text = result.text()
    assert result.is_error
    assert "Invalid arguments for tool 'typed'" in text
    assert "path: Field required" in text
    assert "count:" in text and "valid integer" in text
    assert "mode:" in text
    assert '"count": "many"' in text and '"mode": 3' in text


async def test_a_raising_tool_becomes_an_error_result() -> None:
    model = ScriptedModel([Reply(tool_calls=[call("boom"), call("refuse")]), Reply(text="I see")])
    events = await collect(run_agent(context(BoomTool(), RefuseTool()), model))
    boom, refuse = results_of(events)
    assert boom.is_error and "RuntimeError: disk on fire" in boom.text()
    assert refuse.is_error and refuse.text() == "that file does not exist"
    assert refuse.details == {"path": "x"}
    assert end_of(events).reason == "stop"


async def test_tool_timeout_is_an_error_result() -> None:
    model = ScriptedModel([Reply(tool_calls=[call("slow")]), Reply(text="too slow")])
    started = time.monotonic()
    events = await collect(run_agent(context(SlowTool()), model))
    assert time.monotonic() - started < 1.0
    [result] = results_of(events)
    assert result.is_error and "timed out after 0.1 s" in result.text()


async def test_length_cut_reply_does_not_execute_its_calls() -> None:
    tool = SleepTool()
    cut = call("sleep", {"seconds": 0, "tag": "never"})
    model = ScriptedModel(
        [Reply(text="writing", tool_calls=[cut], stop_reason="length"), Reply(text="retrying")]
    )
    events = await collect(run_agent(context(tool), model))
    assert tool.started == []
    [result] = results_of(events)
    assert result.is_error and "output token limit" in result.text()
    assert "again" in result.text()
    # The model is asked again, with the refusal in front of it.
    assert len(model.requests) == 2
    assert isinstance(model.requests[1].messages[-1], ToolResultMessage)
    assert_replayable([UserMessage(content="go"), *end_of(events).messages])


async def test_cancel_while_streaming_ends_aborted_and_stays_replayable() -> None:
    model = ScriptedModel([Reply(text="a long answer " * 20, chunk_size=4, chunk_delay_s=0.02)])
    control = RunControl()
    events: list[AgentEvent] = []
    started = time.monotonic()
    async for event in run_agent(context(), model, control=control):
        events.append(event)
        if event.type == "message_update" and len(events) == 5:
            control.cancel()
    assert time.monotonic() - started < 0.5
    end = end_of(events)
    assert end.reason == "aborted"
    [aborted] = end.messages
    assert isinstance(aborted, AssistantMessage)
    assert aborted.stop_reason == "aborted"
    assert aborted.text().startswith("a long")  # what people already saw is kept
    assert types(events)[-3:] == ["message_update", "message_end", "agent_end"]
    assert_replayable([UserMessage(content="go"), *end.messages])


async def test_cancel_while_a_tool_runs_cancels_it_promptly() -> None:
    tool = SleepTool()
    calls = [
        call("sleep", {"seconds": 0, "tag": "quick"}),
        call("sleep", {"seconds": 30, "tag": "long"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="never asked")])
    control = RunControl()
    events: list[AgentEvent] = []
    started = time.monotonic()
    async for event in run_agent(context(tool), model, control=control):
        events.append(event)
        if (
            isinstance(event, ToolExecutionUpdate)
            and event.partial.content[0].text == "sleeping long"
        ):  # type: ignore[union-attr]
            asyncio.get_running_loop().call_later(0.05, control.cancel)
    assert time.monotonic() - started < 1.0
    assert tool.cancelled == ["long"] and tool.finished == ["quick"]
    end = end_of(events)
    assert end.reason == "aborted"
    quick, long = results_of(events)
    assert not quick.is_error and quick.text() == "slept quick"
    assert long.is_error and "stopped before this tool finished" in long.text()
    assert isinstance(end.messages[-1], AssistantMessage)
    assert end.messages[-1].stop_reason == "aborted"
    assert len(model.requests) == 1
    assert_replayable([UserMessage(content="go"), *end.messages])


async def test_cancel_before_start_and_closing_the_iterator_both_abort() -> None:
    control = RunControl()
    control.cancel()
    events = await collect(run_agent(context(), ScriptedModel([Reply(text="x")]), control=control))
    assert end_of(events).reason == "aborted"

    tool = SleepTool()
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 30, "tag": "t"})])])
    iterator = run_agent(context(tool), model)
    async for event in iterator:
        if event.type == "tool_execution_update":
            break
    await iterator.aclose()  # type: ignore[attr-defined]
    assert tool.cancelled == ["t"]


async def test_steering_arrives_after_the_running_batch_not_before() -> None:
    tool = SleepTool()
    calls = [
        call("sleep", {"seconds": 0.2, "tag": "a"}),
        call("sleep", {"seconds": 0.3, "tag": "b"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="noted")])
    control = RunControl()
    steer = UserMessage(content="also check the tests")
    events: list[AgentEvent] = []
    async for event in run_agent(context(tool), model, control=control):
        events.append(event)
        if event.type == "tool_execution_update" and len(tool.started) == 2:
            assert tool.finished == []  # the batch is running
            control.steer(steer)
            tool.started.append("steered")
    # Both calls the model made ran to completion despite the steering.
    assert tool.finished == ["a", "b"]
    assert tool.started == ["a", "b", "steered"]
    assert steer not in model.requests[0].messages
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool_result", "tool_result", "user"]
    assert second[-1] is steer
    # The injected message is announced between the turns, before the next reply starts.
    ends = [e.message for e in events if isinstance(e, MessageEnd)]
    assert ends.index(steer) == 3
    assert end_of(events).messages[3] is steer


async def test_several_steering_messages_arrive_together_in_order() -> None:
    tool = SleepTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("sleep", {"seconds": 0.1, "tag": "a"})]), Reply(text="ok")]
    )
    control = RunControl()
    first, second = UserMessage(content="one"), UserMessage(content="two")
    async for event in run_agent(context(tool), model, control=control):
        if event.type == "tool_execution_start":
            control.steer(first)
            control.steer(second)
    assert model.requests[1].messages[-2:] == [first, second]
    assert len(model.requests) == 2


async def test_follow_up_starts_another_turn() -> None:
    model = ScriptedModel(
        [Reply(text="first answer", chunk_delay_s=0.01, chunk_size=4), Reply(text="second answer")]
    )
    control = RunControl()
    follow = UserMessage(content="and another thing")
    events: list[AgentEvent] = []
    async for event in run_agent(context(), model, control=control):
        events.append(event)
        if event.type == "message_start" and len(model.requests) == 1:
            control.follow_up(follow)
    assert len(model.requests) == 2
    assert model.requests[1].messages[-1] is follow
    assert [type(m).__name__ for m in end_of(events).messages] == [
        "AssistantMessage",
        "UserMessage",
        "AssistantMessage",
    ]
    assert types(events).count("turn_start") == 2


async def test_turn_cap_ends_a_runaway_run_clearly() -> None:
    tool = SleepTool()

    def forever(_request: ModelRequest) -> Reply:
        return Reply(tool_calls=[call("sleep", {"seconds": 0, "tag": "again"})])

    model = ScriptedModel(default=forever)
    events = await collect(run_agent(context(tool), model, config=LoopConfig(max_turns=4)))
    end = end_of(events)
    assert end.reason == "turn_limit"
    assert end.error_message is not None and "4 steps" in end.error_message
    assert len(model.requests) == 4
    assert_replayable([UserMessage(content="go"), *end.messages])


async def test_model_error_ends_the_run_with_its_message() -> None:
    failing = AssistantMessage(
        stop_reason="error", error_kind="overloaded", error_message="The model is overloaded."
    )
    events = await collect(run_agent(context(), ScriptedModel([failing])))
    end = end_of(events)
    assert end.reason == "error" and end.error_message == "The model is overloaded."
    assert_replayable([UserMessage(content="go"), *end.messages])


async def test_a_model_that_raises_is_contained() -> None:
    class BrokenModel(ScriptedModel):
        async def stream(self, request: ModelRequest) -> AsyncIterator[object]:  # type: ignore[override]
            raise ValueError("bug")
            yield  # pragma: no cover

    events = await collect(run_agent(context(), BrokenModel()))
    end = end_of(events)
    assert end.reason == "error"
    assert end.error_message == "The model failed unexpectedly (ValueError)."


async def test_history_with_crash_damage_is_repaired_before_the_call() -> None:
    orphan_call = ToolCall(id="c1", name="sleep", arguments={"seconds": 0})
    history: list[Message] = [
        UserMessage(content="start"),
        AssistantMessage(content=[orphan_call], stop_reason="tool_use"),
        AssistantMessage(stop_reason="error", error_message="overloaded"),
        ToolResultMessage(tool_call_id="ghost", tool_name="sleep"),
        UserMessage(content="are you there?"),
    ]
    model = ScriptedModel([Reply(text="yes")])
    await collect(run_agent(context(SleepTool(), messages=history), model))
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool_result", "user"]
    synthetic = sent[2]
    assert isinstance(synthetic, ToolResultMessage)
    assert synthetic.tool_call_id == "c1" and synthetic.is_error
    assert "interrupted" in synthetic.text()
    assert len(history) == 5  # the caller's history is not touched


@pytest.mark.parametrize("count", [0, 3])
async def test_the_caller_identity_and_workspace_reach_tools(count: int, workspace: object) -> None:
    from core.messages import Author

    seen: list[ToolContext] = []

    class Spy(AgentTool[EmptyParams]):
        name = "spy"
        label = "Spy"
        description = "Records its context."
        parameters = EmptyParams

        async def execute(self, call_id: str, params: EmptyParams, ctx: ToolContext) -> ToolResult:
            seen.append(ctx)
            return ToolResult.text("seen")

    ada = Author(id="U1", name="Ada")
    model = ScriptedModel([Reply(tool_calls=[call("spy") for _ in range(count)]), Reply(text="ok")])
    config = LoopConfig(workspace=workspace, caller=ada, conversation_key="terminal:t")  # type: ignore[arg-type]
    await collect(run_agent(context(Spy()), model, config=config))
    assert len(seen) == count
    assert all(c.caller == ada and c.workspace == workspace for c in seen)
    assert len({c.call_id for c in seen}) == count


def test_messages_that_arrived_during_a_tool_batch_replay_after_its_results() -> None:
    tool_call = ToolCall(id="c1", name="sleep", arguments={"seconds": 1})
    asked = UserMessage(content="start")
    calls = AssistantMessage(content=[tool_call], stop_reason="tool_use")
    meanwhile = UserMessage(content="arrived while the tool ran")
    result = ToolResultMessage(tool_call_id="c1", tool_name="sleep")
    answer = AssistantMessage(content=[])
    stored: list[Message] = [asked, calls, meanwhile, result, answer]
    assert repair_history(stored) == [asked, calls, result, meanwhile, answer]
    # Crashed before the result: a synthetic result still comes first.
    repaired = repair_history([asked, calls, meanwhile])
    assert repaired[0:2] == [asked, calls] and repaired[3] is meanwhile
    assert isinstance(repaired[2], ToolResultMessage) and repaired[2].is_error
