"""The loop hands back steering it could not deliver, and labels tool calls (issue 8 F)."""

from __future__ import annotations

from core.events import AgentEnd, AgentEvent, MessageEnd, ToolExecutionStart
from core.loop import MAX_LABEL_CHARS, LoopConfig, RunControl, run_agent
from core.messages import Message, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import ToolContext, ToolResult
from tests.core.test_loop import SleepParams, SleepTool, context


async def test_steering_taken_on_the_last_allowed_turn_is_handed_back() -> None:
    tool = SleepTool()
    model = ScriptedModel(default=Reply(tool_calls=[call("sleep", {"seconds": 0.05})]))
    control = RunControl()
    late = UserMessage(content="one more thing")
    events: list[AgentEvent] = []
    async for event in run_agent(context(tool), model, control=control, config=LoopConfig(2)):
        events.append(event)
        starts = [e for e in events if isinstance(e, ToolExecutionStart)]
        if isinstance(event, ToolExecutionStart) and len(starts) == 2:
            control.steer(late)
    end = events[-1]
    assert isinstance(end, AgentEnd) and end.reason == "turn_limit"
    assert end.undelivered == [late]
    assert not any(isinstance(e, MessageEnd) and e.message is late for e in events)
    assert all(late not in request.messages for request in model.requests)


class StoppedRightAfterTaking(RunControl):
    """A stop that lands just after the loop took the steering, before its next turn."""

    def take_steering(self) -> list[Message]:
        taken = super().take_steering()
        if taken:
            self.cancel("Stopped by Ada.")
        return taken


async def test_a_stopped_run_hands_back_steering_instead_of_delivering_it() -> None:
    tool = SleepTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("sleep", {"seconds": 0.05})]), Reply(text="never")]
    )
    control = StoppedRightAfterTaking()
    late = UserMessage(content="steered, then stopped")
    control.steer(late)
    events = [e async for e in run_agent(context(tool), model, control=control)]
    end = events[-1]
    assert isinstance(end, AgentEnd) and end.reason == "aborted"
    assert end.undelivered == [late]
    assert late not in end.messages
    assert len(model.requests) == 1


class DescribedSleep(SleepTool):
    def summarize(self, params: SleepParams) -> str:
        return f"Sleep {params.seconds:g} s\nfor {params.tag * 200}"


class BrokenDescribe(SleepTool):
    name = "broken"

    def summarize(self, params: SleepParams) -> str:
        raise ValueError("no")

    async def execute(self, call_id: str, params: SleepParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("ok")


async def test_tool_starts_carry_the_tools_own_label() -> None:
    calls = [
        call("sleep", {"seconds": 0, "tag": "x"}),
        call("broken", {"seconds": 0}),
        call("missing", {}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    events = [e async for e in run_agent(context(DescribedSleep(), BrokenDescribe()), model)]
    labels = [e.label for e in events if isinstance(e, ToolExecutionStart)]
    assert labels[0].startswith("Sleep 0 s for xxx") and "\n" not in labels[0]
    assert len(labels[0]) == MAX_LABEL_CHARS and labels[0].endswith("…")
    assert labels[1:] == ["broken", "missing"]


async def test_the_default_label_is_the_tools_label_and_its_first_argument() -> None:
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 0})]), Reply(text="ok")])
    events = [e async for e in run_agent(context(SleepTool()), model)]
    assert [e.label for e in events if isinstance(e, ToolExecutionStart)] == ["Sleep 0.0"]
