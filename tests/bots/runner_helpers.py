"""Shared pieces of the runner tests: a sleeping tool, `Incoming` builder, a runner on the
real SQLite store with ScriptedModel, and history helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bots.incoming import Incoming
from bots.prompt import is_context_note
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import Author, Message
from core.models.base import ModelRequest
from core.models.scripted import ScriptedModel
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.fakes.recording_surface import RecordingSurfaces

ADA = Author(id="U1", name="Ada")
BOB = Author(id="U2", name="Bob")
KEY = "slack:T1:C1:1700000000.000100"
CHANNEL = "slack:T1:C1"


class SleepParams(BaseModel):
    seconds: float


class SleepTool(AgentTool[SleepParams]):
    name = "sleep"
    label = "Sleep"
    description = "Sleep for a while."
    parameters = SleepParams

    def __init__(self) -> None:
        self.workspaces: list[Path] = []
        self.cancelled = 0

    async def execute(self, call_id: str, params: SleepParams, ctx: ToolContext) -> ToolResult:
        self.workspaces.append(ctx.workspace)
        try:
            await asyncio.sleep(params.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return ToolResult.text(f"slept {params.seconds}")


_deliveries = iter(range(1, 1_000_000))


def incoming(
    text: str,
    *,
    key: str = KEY,
    channel: str = CHANNEL,
    author: Author = ADA,
    delivery: str | None = None,
    **extra: Any,
) -> Incoming:
    return Incoming(
        conversation_key=key,
        channel_key=channel,
        author=author,
        text=text,
        delivery_id=delivery or f"evt-{next(_deliveries)}",
        timestamp=1_796_000_000.0,
        **extra,
    )


def make_runner(
    store: SqliteStore,
    tmp_path: Path,
    model: ScriptedModel,
    tools: Sequence[AnyTool] = (),
    surfaces: RecordingSurfaces | None = None,
    **settings: Any,
) -> ConversationRunner:
    return ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path, **settings),
        model_factory=lambda _model_id: model,
        toolset_factory=lambda _channel: tools,
        platform_rules="Plain text only.",
        surfaces=surfaces or RecordingSurfaces(),
    )


async def history(store: SqliteStore, key: str = KEY) -> list[Message]:
    conversation = await store.get_conversation(key)
    assert conversation is not None
    return [stored.message for stored in (await store.load(conversation.id)).messages]


def roles(messages: Sequence[Message]) -> list[str]:
    return [m.role for m in messages]


def channel_context(request: ModelRequest) -> str:
    """The text of the last channel context note the model was given in `request` ("" if
    none): where a channel's instructions and memory reach the model (bots.prompt)."""
    notes = [m for m in request.messages if is_context_note(m)]
    return notes[-1].text() if notes else ""
