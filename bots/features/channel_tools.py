"""The tools bound to a run's channel: its memory (`remember`, `forget`) and scheduled work
(`schedule`).

Owns: `channel_tools_factory`, which the runner calls once per run with the run's channel key,
so each tool acts on that channel only: the channel never comes from a model's arguments.
`schedule` is offered only in channels of a platform this process posts to (a schedule made in
a terminal could never run).

Must not: know a platform, or write SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from bots.features.memory import ChannelMemory, ForgetTool, RememberTool
from bots.features.schedules import Schedules, ScheduleTool
from bots.settings import Settings
from core.tools import AnyTool


def channel_tools_factory(
    settings: Settings,
    memory: ChannelMemory,
    schedules: Schedules | None = None,
    scheduled_platforms: Collection[str] = (),
) -> Callable[[str], Sequence[AnyTool]]:
    def build(channel_key: str) -> Sequence[AnyTool]:
        tools: list[AnyTool] = []
        if settings.memory.enabled:
            tools += [RememberTool(memory, channel_key), ForgetTool(memory, channel_key)]
        served = channel_key.split(":", 1)[0] in scheduled_platforms
        if schedules is not None and settings.schedules.enabled and served:
            tools.append(ScheduleTool(schedules, channel_key))
        return tools

    return build
