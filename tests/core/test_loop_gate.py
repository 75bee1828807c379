"""The gate before a batch's tools run (LoopConfig.before_tool_calls): allow, deny, wait, a
stop while waiting, a failing gate, and a run resumed from a stored reply."""

from __future__ import annotations

import asyncio

from core.events import ToolExecutionStart
from core.loop import (
    Allow,
    Deny,
    GateCall,
    LoopConfig,
    RunControl,
    Verdict,
    run_agent,
)
from core.messages import AssistantMessage, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from tests.core.test_loop import SleepTool, collect, context, end_of, results_of


async def test_a_denied_call_does_not_run_and_the_model_reads_why() -> None:
    tool = SleepTool()
    seen: list[list[str]] = []

    async def gate(calls: list[GateCall]) -> list[Verdict]:
        seen.append([c.label for c in calls])
        return [Allow() if c.call.arguments["tag"] == "a" else Deny("denied by Ann") for c in calls]

    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    call("sleep", {"seconds": 0, "tag": "a"}),
                    call("sleep", {"seconds": 0, "tag": "b"}),
                ]
            ),
            Reply(text="done"),
        ]
    )
    events = await collect(
        run_agent(context(tool), model, config=LoopConfig(before_tool_calls=gate))
    )
    assert tool.started == ["a"]  # b was denied: never executed
    results = results_of(events)
    assert [r.is_error for r in results] == [False, True]
    assert results[1].text() == "denied by Ann"
    assert results[1].details == {"reason": "denied"}
    assert len(seen) == 1 and len(seen[0]) == 2  # one request for the whole batch
    assert end_of(events).reason == "stop"


async def test_nothing_is_announced_before_the_gate_decides() -> None:
    tool = SleepTool()
    release = asyncio.Event()
    asked = asyncio.Event()
    started_before: list[bool] = []
    events_seen: list[object] = []

    async def gate(calls: list[GateCall]) -> list[Verdict]:
        started_before.append(any(isinstance(e, ToolExecutionStart) for e in events_seen))
        asked.set()
        await release.wait()
        return [Allow() for _ in calls]

    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 0})]), Reply(text="ok")])

    async def consume() -> None:
        async for event in run_agent(
            context(tool), model, config=LoopConfig(before_tool_calls=gate)
        ):
            events_seen.append(event)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(asked.wait(), 30)
    await asyncio.sleep(0.05)  # events emitted so far reach the consumer
    assert tool.started == []
    release.set()
    await asyncio.wait_for(task, 30)
    assert started_before == [False]
    assert tool.started == [""]


async def test_a_stop_while_the_gate_waits_ends_the_run_and_runs_nothing() -> None:
    tool = SleepTool()
    control = RunControl()
    waiting = asyncio.Event()

    async def gate(calls: list[GateCall]) -> list[Verdict]:
        waiting.set()
        await asyncio.Event().wait()  # a person who never answers
        raise AssertionError("unreachable")

    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 0})])])
    task = asyncio.create_task(
        collect(
            run_agent(
                context(tool), model, control=control, config=LoopConfig(before_tool_calls=gate)
            )
        )
    )
    await asyncio.wait_for(waiting.wait(), 30)
    control.cancel("Stopped by Bob.")
    events = await asyncio.wait_for(task, 30)
    assert tool.started == []
    end = end_of(events)
    assert end.reason == "aborted" and end.error_message == "Stopped by Bob."
    assert [r.is_error for r in results_of(events)] == [True]  # the call still has a result


async def test_a_gate_that_raises_denies_its_batch() -> None:
    tool = SleepTool()

    async def gate(calls: list[GateCall]) -> list[Verdict]:
        raise RuntimeError("database gone")

    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 0})]), Reply(text="ok")])
    events = await collect(
        run_agent(context(tool), model, config=LoopConfig(before_tool_calls=gate))
    )
    assert tool.started == []
    assert results_of(events)[0].is_error


async def test_unknown_tools_are_refused_without_asking_the_gate() -> None:
    asked: list[str] = []

    async def gate(calls: list[GateCall]) -> list[Verdict]:
        asked.extend(c.call.name for c in calls)
        return [Allow() for _ in calls]

    model = ScriptedModel([Reply(tool_calls=[call("nope")]), Reply(text="ok")])
    events = await collect(
        run_agent(context(SleepTool()), model, config=LoopConfig(before_tool_calls=gate))
    )
    assert asked == []
    assert results_of(events)[0].is_error


async def test_a_resumed_run_executes_the_stored_calls_without_asking_the_model() -> None:
    tool = SleepTool()
    stored = AssistantMessage(
        content=[call("sleep", {"seconds": 0, "tag": "stored"}, id="call_stored")],
        stop_reason="tool_use",
    )
    model = ScriptedModel([Reply(text="after the tool")])
    ctx = context(tool, messages=[UserMessage(content="go")])
    ctx.resume = stored
    events = await collect(run_agent(ctx, model))
    assert tool.started == ["stored"]
    assert len(model.requests) == 1  # only the reply after the tool
    sent = model.requests[0].messages
    assert sent[-2] is stored and results_of(events)[0].tool_call_id == "call_stored"
    assert end_of(events).reason == "stop"
