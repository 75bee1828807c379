"""The tools bound to a run's channel: its memory (`remember`, `forget`) and, when built with a
scheduler's checks, scheduled work (`schedule`).

Owns: `channel_tools_factory`, which the runner calls once per run with the run's channel key,
so each tool acts on that channel only: the channel never comes from a model's arguments.

Must not: know a platform, or write SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bots.memory import ChannelMemory, ForgetTool, RememberTool
from bots.settings import Settings
from core.tools import AnyTool


def channel_tools_factory(
    settings: Settings,
    memory: ChannelMemory,
    extra: Callable[[str], Sequence[AnyTool]] | None = None,
) -> Callable[[str], Sequence[AnyTool]]:
    def build(channel_key: str) -> Sequence[AnyTool]:
        tools: list[AnyTool] = []
        if settings.memory.enabled:
            tools += [RememberTool(memory, channel_key), ForgetTool(memory, channel_key)]
        if extra is not None:
            tools += extra(channel_key)
        return tools

    return build
