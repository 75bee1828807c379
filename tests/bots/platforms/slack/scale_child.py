"""One Teammate instance of the scale-out test: `teammate slack --http` on a shared PostgreSQL.

Usage: `python -m tests.bots.platforms.slack.scale_child API_URL DATABASE_URL DATA_DIR GATE_DIR`.
Prints `PORT <n>` once it takes events, then serves until SIGTERM (or SIGKILL).

It is `bots.serve.serve`'s wiring (SlackBot in HTTP mode, the store `TEAMMATE_DATABASE_URL`
names, the real runner, `bot.run`), with two things a test needs that the CLI's fixed
`--model scripted` reply cannot give:
- an echo model, so what Slack shows names the message it answers: every `tok:<id>` in the
  messages since the model last spoke comes back as `re tok:<id>`; a message with
  `hold:<gate>` first calls the `hold` tool, which waits until `GATE_DIR/<gate>` exists (the
  test opens it; `hold:never` is where an instance is SIGKILLed mid-answer, after the message
  was accepted);
- a short lease and takeover sweep (1 s / 1 s instead of 30 s / 15 s), so a survivor takes
  over a killed instance's conversations within the test's patience.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from pathlib import Path

from pydantic import BaseModel

from bots.platforms.slack.app import SLACK_RULES, SlackBot
from bots.runner import ConversationRunner
from bots.runner import instances as runner_instances
from bots.settings import Settings
from core.messages import AssistantMessage, ToolResultMessage, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.postgres import PostgresStore
from tests.fakes.slack_server import BOT_TOKEN

SECRET = "scale-out-signing-secret"
LEASE_TTL_S = 1.0
TOKEN = re.compile(r"tok:[\w-]+")
HOLD = re.compile(r"hold:([\w-]+)")


class HoldParams(BaseModel):
    gate: str


class HoldTool(AgentTool[HoldParams]):
    """Holds the run inside a tool call until the test creates the gate file."""

    name = "hold"
    label = "Hold"
    description = "Waits for a gate."
    parameters = HoldParams

    def __init__(self, gates: Path) -> None:
        self._gates = gates

    async def execute(self, call_id: str, params: HoldParams, ctx: ToolContext) -> ToolResult:
        gate = self._gates / params.gate
        while not gate.exists():  # noqa: ASYNC110 (another process opens it: no Event to share)
            await asyncio.sleep(0.02)
        return ToolResult.text(f"opened {params.gate}")


def echo(request: ModelRequest) -> Reply:
    """`re tok:…` for every token said since the model last answered in words (or since a run
    interrupted in its tool); `hold` first if asked (so a message steered in during the hold
    is answered together with the one that held)."""
    recent: list[str] = []
    held = False
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage) and message.text().strip():
            break
        if isinstance(message, ToolResultMessage):
            if not message.text().startswith("opened "):
                break  # a run interrupted in its tool (recovered): its messages stay unanswered
            held = True
        if isinstance(message, UserMessage):
            recent.insert(0, message.text())
    said = "\n".join(recent)
    gate = HOLD.search(said)
    if gate is not None and not held:
        return Reply(tool_calls=[call("hold", {"gate": gate.group(1)})])
    tokens = TOKEN.findall(said)
    return Reply(text=" ".join(f"re {token}" for token in tokens) or "done")


async def main(api_url: str, database_url: str, data_dir: Path, gates: Path) -> None:
    runner_instances.TAKEOVER_SWEEP_S = 1.0  # read on each sweep: a prompt takeover in tests
    settings = Settings(
        data_dir=data_dir,
        model="scripted",
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SECRET,
        slack_api_url=api_url,
    )
    model = ScriptedModel(default=echo, record=False)
    tools = [HoldTool(gates)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    bot = SlackBot(settings)
    async with PostgresStore.open(database_url, lease_ttl_s=LEASE_TTL_S) as store:
        runner = ConversationRunner(
            store=store,
            settings=settings,
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: tools,
            platform_rules=SLACK_RULES,
            surfaces=bot.surfaces,
        )
        try:
            await bot.run(
                runner,
                mode="http",
                host="127.0.0.1",
                port=0,
                stop=stop,
                grace_s=2.0,
                ready=lambda port: print(f"PORT {port}", flush=True),
            )
        finally:
            await runner.close()


if __name__ == "__main__":
    logging.basicConfig(  # to the file the test gave as stderr
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])))
