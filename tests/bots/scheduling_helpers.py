"""Shared pieces of the scheduling tests: a thread starter that records what it posted and
shows each run on a `RecordingSurface`, and a runner wired with the channel tools."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bots.features.channel_tools import channel_tools_factory
from bots.features.memory import ChannelMemory
from bots.features.scheduler import Scheduler, StartedThread
from bots.features.schedules import Schedules
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.models.scripted import ScriptedModel
from storage.base import ConversationStore
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces


@dataclass
class Posted:
    channel_key: str
    text: str
    for_user: str
    conversation_key: str
    surface: RecordingSurface


@dataclass
class RecordingStarter:
    posted: list[Posted] = field(default_factory=list)
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        key = f"{channel_key}:{1_800_000_000 + next(self._ts)}.000100"
        surface = RecordingSurface(key)
        self.posted.append(Posted(channel_key, text, for_user, key, surface))
        return StartedThread(key, surface)


@dataclass
class Wired:
    runner: ConversationRunner
    scheduler: Scheduler
    schedules: Schedules
    starter: RecordingStarter


def shared(clock: Callable[[], float]) -> Callable[[], Awaitable[float]]:
    """A fake clock as the instances' shared clock (the database's, in production), so that a
    test moves both when it moves time."""

    async def now() -> float:
        return clock()

    return now


def wire(
    store: ConversationStore,
    tmp_path: Path,
    model: ScriptedModel,
    clock: Callable[[], float],
    **settings: Any,
) -> Wired:
    config = Settings(data_dir=tmp_path, **settings)
    schedules = Schedules(store, config, clock=clock)
    runner = ConversationRunner(
        store=store,
        settings=config,
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [],
        platform_rules={"slack": "Plain text only."},
        surfaces=RecordingSurfaces(),
        clock=clock,
        channel_tools=channel_tools_factory(
            config, ChannelMemory(store, config.memory), schedules, ["slack"]
        ),
    )
    scheduler = Scheduler(runner, config, clock=clock, shared_clock=shared(clock))
    starter = RecordingStarter()
    scheduler.add_platform("slack", starter)
    return Wired(runner, scheduler, schedules, starter)
