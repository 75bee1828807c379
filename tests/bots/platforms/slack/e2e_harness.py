"""Teammate's Slack app, end to end: the real bolt app and slack_sdk, the real runner on a real
SQLite store, a model (ScriptedModel, or AnthropicModel on FakeAnthropic), against FakeSlack.
Events go in as Slack sends them (signed HTTP requests, or Socket Mode envelopes); tests assert
on what the fake received."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from bots.app import ModelFactory
from bots.features.channel_tools import channel_tools_factory
from bots.features.memory import ChannelMemory
from bots.platforms.slack.app import SLACK_RULES, SlackBot
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.models.base import Model
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.fakes.slack_server import FakeSlack, interactive_body, signed_request

SECRET = "e2e-signing-secret"
ALICE = "UALICE"
BOB = "UBOB"
Mode = Literal["http", "socket"]


class EchoParams(BaseModel):
    text: str


class EchoTool(AgentTool[EchoParams]):
    name = "echo"
    label = "Echo"
    description = "Says the text back."
    parameters = EchoParams

    async def execute(self, call_id: str, params: EchoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(f"echo: {params.text}")


class ReportTool(AgentTool[EchoParams]):
    """Writes a file in the channel's workspace and offers it to attach to the answer."""

    name = "report"
    label = "Report"
    description = "Writes report.txt and attaches it."
    parameters = EchoParams

    async def execute(self, call_id: str, params: EchoParams, ctx: ToolContext) -> ToolResult:
        (ctx.workspace / "report.txt").write_text(params.text)
        offered = [{"path": "report.txt", "name": "report.txt", "mime_type": "text/plain"}]
        return ToolResult.text("written", details={"files_out": offered})


@dataclass
class Harness:
    fake: FakeSlack
    bot: SlackBot
    runner: ConversationRunner
    store: SqliteStore
    model: Model
    mode: Mode
    port: int | None
    workspaces: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    async def send(
        self,
        payload: dict[str, Any],
        *,
        retry_num: int | None = None,
        kind: Literal["events_api", "interactive"] = "events_api",
    ) -> int:
        """Deliver one payload as Slack does; returns the HTTP status (200 for a Socket Mode
        envelope the app acknowledged)."""
        if self.mode == "socket":
            await self.fake.socket_send(payload, type=kind, retry_attempt=retry_num or 0)
            return 200
        body: Any = payload if kind == "events_api" else interactive_body(payload)
        response = await signed_request(self.url, body, SECRET, retry_num=retry_num)
        return response.status

    async def event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_num: int | None = None
    ) -> int:
        return await self.send(
            self.fake.event_callback(event, event_id=event_id), retry_num=retry_num
        )

    async def settle(self, limit_s: float = 30.0) -> None:
        """Every acknowledged event handed to the runner, every answer finished and shown
        (bounded, so a test that would hang fails instead)."""

        async def _settle() -> None:
            await self.bot.drain()
            await self.runner.wait_all()

        await asyncio.wait_for(_settle(), limit_s)

    def replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return self.fake.bot_replies(channel, thread_ts)


def message_event(
    fake: FakeSlack,
    text: str,
    *,
    channel: str = "C1",
    user: str = ALICE,
    thread_ts: str | None = None,
    mention: bool = True,
    kind: Literal["app_mention", "message"] = "app_mention",
    files: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A message people posted (stored in the fake, so threads and backfill see it) and the
    event Slack sends for it."""
    full = f"<@{fake.bot_user_id}> {text}" if mention else text
    extra: dict[str, Any] = {"files": list(files)} if files else {}
    stored = fake.seed_message(channel, full, user=user, thread_ts=thread_ts, **extra)
    event: dict[str, Any] = {
        "type": kind,
        "user": user,
        "text": full,
        "ts": stored["ts"],
        "channel": channel,
        "event_ts": stored["ts"],
        "team": fake.team_id,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if kind == "message":
        event["channel_type"] = "im" if channel.startswith("D") else "channel"
    if files:
        event["files"] = list(files)
        event["subtype"] = "file_share"
    return event


def slack_hosted(file: dict[str, Any]) -> dict[str, Any]:
    """A fake-hosted file as Slack lists it, on files.slack.com (the app fetches such URLs from
    the configured Slack-compatible server: the fake)."""
    path = file["url_private_download"].split("/files/", 1)[1]
    return file | {"url_private_download": f"https://files.slack.com/files/{path}"}


def settings_for(fake: FakeSlack, data_dir: Path, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "data_dir": data_dir,
        "model": "scripted",
        "slack_bot_token": fake.bot_token,
        "slack_app_token": fake.app_token,
        "slack_signing_secret": SECRET,
        "slack_api_url": fake.api_url,
    }
    return Settings(**(fields | overrides))


@asynccontextmanager
async def running(
    fake: FakeSlack,
    data_dir: Path,
    model: Model,
    *,
    mode: Mode = "http",
    tools: Sequence[AnyTool] | Callable[[], Sequence[AnyTool]] = (),
    real_model: str | None = None,
    channel_tools: bool = False,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """The app as `teammate slack` runs it, on `data_dir` (reuse it to restart).

    `real_model`: that model id on the Anthropic adapter, with the key and base URL given in
    `overrides` (a fake Messages API's), instead of `model`. `channel_tools`: the channel's
    own tools too (remember / forget), as `teammate slack` gives them. `tools` may be a
    callable, asked at each run (an MCP server's list can change between two questions)."""
    if real_model is not None:
        overrides["model"] = real_model
    settings = settings_for(fake, data_dir, **overrides)
    bot = SlackBot(settings)
    store = await SqliteStore.open(settings.database_path)
    models = ModelFactory(settings) if real_model is not None else None
    memory = ChannelMemory(store, settings.memory, settings.secrets())

    def model_for(_model_id: str) -> Model:
        return models(_model_id) if models is not None else model

    def toolset(_channel: str) -> Sequence[AnyTool]:
        return tools() if callable(tools) else tools

    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=model_for,
        toolset_factory=toolset,
        platform_rules=SLACK_RULES,
        surfaces=bot.surfaces,
        channel_tools=channel_tools_factory(settings, memory) if channel_tools else None,
    )
    try:
        await bot.start(runner)
        await runner.recover()
        port: int | None = None
        if mode == "socket":
            await bot.connect_socket_mode()
        else:
            port = await bot.listen_http("127.0.0.1", 0)
        yield Harness(fake, bot, runner, store, model, mode, port, settings.workspaces_dir)
    finally:
        await bot.shutdown(grace_s=5.0)
        await runner.close()
        if models is not None:
            await models.aclose()
        await store.close()


def texts(messages: Sequence[dict[str, Any]]) -> str:
    """Everything people can read in `messages`: text, markdown blocks, attachments."""
    return json.dumps(messages, ensure_ascii=False)
