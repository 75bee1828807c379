"""Platform outage (issue 13): Slack's Web API answers 429 or 500 for a while, or for good,
and its Socket Mode connection drops mid-answer. The final answer is delivered exactly once
when Slack recovers, or reported in the log as undeliverable, never posted twice; a
disconnect loses nothing. (Discord's gateway reconnect mid-run: tests/bots/platforms/discord/
test_bot_e2e.py, `test_a_gateway_reconnect_during_a_run_loses_nothing`.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel

from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from tests.bots.platforms.slack.e2e_harness import message_event, running
from tests.chaos.fault_kit import LogCapture, fake_anthropic, fake_slack, slack_app
from tests.chaos.test_fault_disk import captured_logs
from tests.fakes.anthropic_server import text_reply
from tests.fakes.slack_server import FakeSlack

ANSWER = "The answer that must arrive exactly once."
# Every way the surface may write an answer: natively streamed, posted, or updated.
WRITES = ("chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage")


def _times_shown(slack: FakeSlack, ts: str) -> int:
    """How many messages in the thread show the answer (its text and blocks count once)."""
    return sum(ANSWER in json.dumps(reply) for reply in slack.bot_replies("C1", ts))


async def _outage(path: Path, status: int, times: int) -> tuple[FakeSlack, str, LogCapture]:
    async with (
        fake_slack() as slack,
        fake_anthropic() as model_api,
        slack_app(slack, model_api, path) as app,
    ):
        for method in WRITES:
            slack.fail_next(method, status, retry_after=1, times=times)
        model_api.add(text_reply(ANSWER))
        with captured_logs() as logs:
            ts = await app.mention("what is the answer?")
            await app.settle(limit_s=120)
        # Slack is back for good: a later question is answered normally.
        slack.clear_faults()
        model_api.add(text_reply("and the next one"))
        await app.mention("and next?", thread_ts=ts)
        await app.settle()
        assert "and the next one" in json.dumps(slack.bot_replies("C1", ts))
    return slack, ts, logs


async def slack_rate_limited_for_a_while(path: Path) -> None:
    slack, ts, _logs = await _outage(path, 429, times=2)
    assert _times_shown(slack, ts) == 1


async def slack_failing_for_a_while(path: Path) -> None:
    slack, ts, _logs = await _outage(path, 500, times=3)
    assert _times_shown(slack, ts) == 1


async def slack_failing_for_good(path: Path) -> None:
    """Slack answers 500 longer than the answer waits: logged as undeliverable, no repeat."""
    slack, ts, logs = await _outage(path, 500, times=1_000)
    assert _times_shown(slack, ts) == 0
    assert "undeliverable: part answer:0" in logs.text


class GateParams(BaseModel):
    pass


class GateTool(AgentTool[GateParams]):
    name = "gate"
    label = "Gate"
    description = "Waits until released."
    parameters = GateParams

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, call_id: str, params: GateParams, ctx: ToolContext) -> ToolResult:
        self.started.set()
        await self.release.wait()
        return ToolResult.text("released")


async def socket_mode_drops_mid_answer(path: Path) -> None:
    gate = GateTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("gate")]), Reply(text=ANSWER), Reply(text="second answer")]
    )
    async with (
        fake_slack() as slack,
        running(slack, path, model, mode="socket", tools=[gate]) as app,
    ):
        first = message_event(slack, "a long question")
        await app.event(first)
        await asyncio.wait_for(gate.started.wait(), 30)
        await slack.disconnect()  # Slack drops the connection while the answer is working
        await slack.wait_for(lambda f: f.connections >= 2 and f.socket_connected, 30)
        second = message_event(slack, "a question after the reconnect")
        await app.event(second)
        gate.release.set()
        await app.settle()
        assert _times_shown(slack, first["ts"]) == 1
        assert "second answer" in json.dumps(slack.bot_replies("C1", second["ts"]))


# The benchmark (benchmarks/chaos_faults.py) runs every scenario; CI runs the quick ones.
SCENARIOS: dict[str, Callable[[Path], Awaitable[None]]] = {
    "429 for a while": slack_rate_limited_for_a_while,
    "500 for a while": slack_failing_for_a_while,
    "500 for good": slack_failing_for_good,
    "socket drop mid-answer": socket_mode_drops_mid_answer,
}


async def test_slack_rate_limiting_for_a_while_delays_the_answer_but_shows_it_once(
    tmp_path: Path,
) -> None:
    await slack_rate_limited_for_a_while(tmp_path)


async def test_slack_failing_for_a_while_delivers_the_answer_once_when_it_recovers(
    tmp_path: Path,
) -> None:
    await slack_failing_for_a_while(tmp_path)


async def test_a_socket_mode_drop_mid_answer_loses_nothing(tmp_path: Path) -> None:
    await socket_mode_drops_mid_answer(tmp_path)
