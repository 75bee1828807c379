"""The agent loop's own cost per turn, by history length.

A zero-latency ScriptedModel answers every call with one call of a no-op tool; after TURNS turns
it answers with text. Whatever time passes is the loop's (plus the scripted model's trivial
streaming). Measured for histories of 10, 1,000 and 10,000 messages. Also reports the one-off
cost of starting a run (history repair), which is paid once per incoming message, not per turn.

Run: uv run python -m benchmarks.loop_overhead [--turns 300] [--repeats 5]
Prints a table, then one JSON line with ms_per_turn_10, ms_per_turn_1000, ms_per_turn_10000.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import time

from pydantic import BaseModel

from core.loop import AgentContext, LoopConfig, run_agent
from core.messages import (
    AssistantMessage,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel
from core.tools import AgentTool, ToolContext, ToolResult

SIZES = (10, 1_000, 10_000)


class NoParams(BaseModel):
    pass


class NoopTool(AgentTool[NoParams]):
    name = "noop"
    label = "No-op"
    description = "Does nothing."
    parameters = NoParams

    async def execute(self, call_id: str, params: NoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("ok")


def history(size: int) -> list[Message]:
    """A realistic history: user, assistant with a tool call, tool result, assistant text..."""
    messages: list[Message] = []
    index = 0
    while len(messages) < size:
        messages.append(UserMessage(content=f"question {index}: " + "words " * 20))
        messages.append(
            AssistantMessage(
                content=[
                    Text(text="Let me look."),
                    ToolCall(id=f"h{index}", name="noop", arguments={}),
                ],
                stop_reason="tool_use",
            )
        )
        messages.append(
            ToolResultMessage(tool_call_id=f"h{index}", tool_name="noop", content=[Text(text="ok")])
        )
        messages.append(AssistantMessage(content=[Text(text="answer " * 30)]))
        index += 1
    return messages[:size] if size % 4 in (0, 1) else messages[: size - size % 4]


async def one_run(size: int, turns: int) -> tuple[float, float]:
    """(ms per turn, ms to start the run) for one run of `turns` tool turns + a final reply."""
    counter = 0

    def reply(_request: ModelRequest) -> Reply:
        nonlocal counter
        counter += 1
        if counter > turns:
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(id=f"t{counter}", name="noop", arguments={})])

    model = ScriptedModel(default=reply, record=False)
    context = AgentContext(system_prompt="bench", messages=history(size), tools=[NoopTool()])
    config = LoopConfig(max_turns=turns + 10)
    gc.collect()
    started = time.perf_counter()
    first_turn_at = 0.0
    async for event in run_agent(context, model, config=config):
        if event.type == "turn_start" and event.turn == 1:
            first_turn_at = time.perf_counter()
    ended = time.perf_counter()
    per_turn = (ended - first_turn_at) / (turns + 1) * 1000
    return per_turn, (first_turn_at - started) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    print(
        f"conditions: python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} cores, {args.turns} tool turns per run, median of {args.repeats} runs, "
        "zero-latency ScriptedModel, one no-op tool"
    )
    await one_run(10, 20)  # warm up imports and caches
    figures: dict[str, float] = {}
    print(f"{'history':>10} {'ms/turn':>10} {'run start ms':>14}")
    for size in SIZES:
        samples = [await one_run(size, args.turns) for _ in range(args.repeats)]
        per_turn = statistics.median(s[0] for s in samples)
        start = statistics.median(s[1] for s in samples)
        figures[f"ms_per_turn_{size}"] = round(per_turn, 4)
        figures[f"run_start_ms_{size}"] = round(start, 3)
        print(f"{size:>10} {per_turn:>10.4f} {start:>14.3f}")
    ratio = figures["ms_per_turn_10000"] / figures["ms_per_turn_10"]
    figures["ratio_10000_to_10"] = round(ratio, 2)
    print(f"ratio 10,000 : 10 = {ratio:.2f} (target <= 3)")
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
