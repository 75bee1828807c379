"""Approvals: the time from a person's click on Approve to the tool starting.

The real Slack app in HTTP mode (bolt, slack_sdk, the runner, a real SQLite store) against the
fake Slack Web API (`tests/fakes/slack_server.py`), in this process, with a zero-latency
ScriptedModel whose every run calls one tool that `[approvals]` names. For each of N runs: a
mention starts the run, the request message with its buttons appears at the fake, then a
signed `block_actions` request for Approve is sent; the time from sending the click to the
tool's `execute` starting is measured (the click's acknowledgement, its checks, the stored
decision, the audit entry, the waiting run woken, and the tool started). Runs one after
another, so each figure is one click's own path.

Run: `uv run python -m benchmarks.approvals` or `uv run python benchmarks/approvals.py`
[--approvals 100]. Prints the conditions, a table, and last one JSON line with
`approval_to_start_p50_ms`, `approval_to_start_p99_ms`, `approval_to_start_max_ms`,
`approvals`. Target: p99 under 200 ms.
A measurement, not a test: CI does not run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/approvals.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from typing import Any

from pydantic import BaseModel

from bots.platforms.slack.approval_blocks import APPROVAL_ACTION_IDS
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from tests.bots.platforms.slack.e2e_harness import ALICE, message_event, running
from tests.fakes.slack_server import FakeSlack

TARGET_P99_MS = 200.0


class TimedParams(BaseModel):
    n: int


class TimedTool(AgentTool[TimedParams]):
    """Notes when each call starts."""

    name = "deploy"
    label = "Deploy"
    description = "Deploys."
    parameters = TimedParams

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.event = asyncio.Event()

    async def execute(self, call_id: str, params: TimedParams, ctx: ToolContext) -> ToolResult:
        self.started[params.n] = time.perf_counter()
        self.event.set()
        return ToolResult.text("deployed")


def request_message(fake: FakeSlack, thread_ts: str) -> tuple[dict[str, Any], str] | None:
    for message in fake.bot_replies("C1", thread_ts):
        for block in message.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("action_id") == APPROVAL_ACTION_IDS["approve"]:
                    return message, str(element["value"])
    return None


def click(fake: FakeSlack, message: dict[str, Any], value: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": ALICE, "username": "alice", "team_id": fake.team_id},
        "api_app_id": "A0APP",
        "team": {"id": fake.team_id, "domain": "fake"},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": "C1",
            "is_ephemeral": False,
            "thread_ts": message.get("thread_ts"),
        },
        "channel": {"id": "C1", "name": "general"},
        "message": message,
        "trigger_id": "1.2.3",
        "response_url": fake.base_url + "response/1",
        "actions": [
            {
                "type": "button",
                "action_id": APPROVAL_ACTION_IDS["approve"],
                "block_id": "b1",
                "value": value,
                "action_ts": "1796000000.000001",
            }
        ],
    }


async def measure(count: int) -> list[float]:
    tool = TimedTool()
    script = []
    for n in range(count):
        script += [Reply(tool_calls=[call("deploy", {"n": n})]), Reply(text="done")]
    model = ScriptedModel(script)
    approvals = {"tools": ["deploy"], "approvers": "asker", "timeout_s": 600}
    timings: list[float] = []
    with tempfile.TemporaryDirectory() as data_dir:
        async with (
            FakeSlack() as fake,
            running(fake, Path(data_dir), model, tools=[tool], approvals=approvals) as app,
        ):
            fake.add_user(ALICE, "alice")
            for n in range(count):
                event = message_event(fake, f"deploy {n}")
                thread: str = event["ts"]
                await app.event(event)
                await fake.wait_for(
                    lambda f, ts=thread: request_message(f, ts) is not None,  # type: ignore[misc]
                    30,
                )
                found = request_message(fake, thread)
                assert found is not None
                message, value = found
                tool.event.clear()
                sent = time.perf_counter()
                await app.send(click(fake, message, value), kind="interactive")
                await asyncio.wait_for(tool.event.wait(), 30)
                timings.append((tool.started[n] - sent) * 1000)
                await app.settle()
    return timings


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--approvals", type=int, default=100)
    args = parser.parse_args()
    print(
        f"approvals: {args.approvals} clicks through the fake Slack (HTTP mode, SQLite), one "
        f"after another · Python {platform.python_version()} · {os.cpu_count()} CPUs · "
        f"load {os.getloadavg()[0]:.2f}"
    )
    timings = await measure(args.approvals)
    p50, p99 = statistics.median(timings), percentile(timings, 0.99)
    print(f"{'click → tool start':<24}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    print(f"{'':<24}{p50:>10.1f}{p99:>10.1f}{max(timings):>10.1f}")
    verdict = "met" if p99 < TARGET_P99_MS else "NOT met"
    print(f"target p99 < {TARGET_P99_MS:.0f} ms: {verdict}")
    print(
        json.dumps(
            {
                "approval_to_start_p50_ms": round(p50, 2),
                "approval_to_start_p99_ms": round(p99, 2),
                "approval_to_start_max_ms": round(max(timings), 2),
                "approvals": len(timings),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
