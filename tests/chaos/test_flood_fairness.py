"""Flood fairness (issue 13): a channel flooded with threads, or one person writing in many,
gets a bounded share of the runs in progress; a quiet channel is answered meanwhile. The real
runner on the real SQLite store, ScriptedModel, and a tool that holds each run open."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import Author, ToolResultMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import incoming
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces

NOISY = Author(id="UNOISY", name="Noisy")
QUIET = Author(id="UQUIET", name="Quiet")


class HoldParams(BaseModel):
    pass


class HoldTool(AgentTool[HoldParams]):
    """Holds its run until released; counts runs in progress per channel and per person."""

    name = "hold"
    label = "Hold"
    description = "Waits until released."
    parameters = HoldParams

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.channels: Counter[str] = Counter()
        self.users: Counter[str] = Counter()
        self.peak_channel: Counter[str] = Counter()
        self.peak_user: Counter[str] = Counter()
        self.peak_total = 0
        self.changed = asyncio.Event()

    async def execute(self, call_id: str, params: HoldParams, ctx: ToolContext) -> ToolResult:
        key = ctx.conversation_key or ""
        channel = key.rsplit(":", 1)[0]
        user = ctx.caller.id if ctx.caller else ""
        self.started.append(key)
        self.channels[channel] += 1
        self.users[user] += 1
        self.peak_channel[channel] = max(self.peak_channel[channel], self.channels[channel])
        self.peak_user[user] = max(self.peak_user[user], self.users[user])
        self.peak_total = max(self.peak_total, self.channels.total())
        self.changed.set()
        try:
            await self.release.wait()
        finally:
            self.channels[channel] -= 1
            self.users[user] -= 1
        return ToolResult.text("released")

    async def wait_started(self, key: str) -> None:
        while key not in self.started:
            self.changed.clear()
            await self.changed.wait()


def _hold_then_answer(request: ModelRequest) -> Reply:
    if request.messages and isinstance(request.messages[-1], ToolResultMessage):
        return Reply(text="answered")
    return Reply(tool_calls=[call("hold")])


async def test_a_flooded_channel_gets_a_bounded_share_and_a_quiet_one_is_answered(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "teammate.db")
    hold = HoldTool()
    runner = ConversationRunner(
        store=store,
        settings=Settings(
            data_dir=tmp_path,
            max_concurrent_runs=6,
            max_runs_per_channel=3,
            max_runs_per_user=4,
        ),
        model_factory=lambda _id: ScriptedModel(default=_hold_then_answer),
        toolset_factory=lambda _channel: [hold],
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
    )
    surfaces: dict[str, RecordingSurface] = {}
    try:
        # One person floods two channels with 15 threads each.
        for n in range(30):
            channel = f"slack:T1:CNOISY{n % 2}"
            key = f"{channel}:17000000{n:02d}.000100"
            surfaces[key] = RecordingSurface(key)
            await runner.submit(
                incoming(f"flood {n}", key=key, channel=channel, author=NOISY), surfaces[key]
            )
        quiet_key = "slack:T1:CQUIET:1700009999.000100"
        surfaces[quiet_key] = RecordingSurface(quiet_key)
        await runner.submit(
            incoming("a quiet question", key=quiet_key, channel="slack:T1:CQUIET", author=QUIET),
            surfaces[quiet_key],
        )
        # The quiet channel's run starts while the flood is still held: not starved.
        await asyncio.wait_for(hold.wait_started(quiet_key), 30)
        assert max(hold.peak_channel[f"slack:T1:CNOISY{i}"] for i in (0, 1)) <= 3
        assert hold.peak_user[NOISY.id] <= 4
        assert hold.peak_total <= 6
        assert len(hold.started) < 31  # the rest of the flood waits its turn, stored

        hold.release.set()
        await asyncio.wait_for(runner.wait_all(), 60)
        # Every message answered exactly once, in its own thread.
        for key, surface in surfaces.items():
            finished = surface.finished()
            assert [f.outcome for f in finished] == ["done"], key
            assert finished[0].final_text == "answered"
        assert sorted(hold.started) == sorted(surfaces)
        assert hold.peak_user[NOISY.id] <= 4 and hold.peak_total <= 6
    finally:
        await runner.close()
        await store.close()
