"""Fencing, the runner's side: a run whose lease may be gone does nothing more.

Owns: `RunFence` (a run's lease token and the question "may it still be ours?", asked of this
instance's own clock and of the heartbeat's news, never of the database), and the wrappers
that ask it inside the loop's own task, right before each model call (`FencedModel`) and each
tool call (`fenced_tools`): the loop does not wait for the runner to store what it emitted, so
only a check there keeps a paused instance from starting one after its lease could have
expired. The store refuses the writes (`storage.postgres_fencing`); this stops the work. On a
store one process owns there is no token, and nothing is wrapped.

Must not: write to the store, or show anything (a fenced-out run is quiet: another instance
owns the conversation and shows what happened there).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bots.inbox import RunState
from bots.runner.texts import LEASE_LOST_TEXT
from core.models.base import Model, ModelInfo, ModelRequest, StreamEvent, ToolSpec
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from storage.base import Fence, FencedOut, InstanceCoordination

__all__ = ["FencedModel", "RunFence", "fenced_tools"]


class RunFence:
    """A run's lease: the token its writes carry, and whether it may still be this
    instance's (None token: a store one process owns, always)."""

    def __init__(self, instances: InstanceCoordination, run: RunState, token: Fence | None):
        self._instances = instances
        self._run = run
        self.token = token

    def stale(self) -> bool:
        """True once the lease may have expired by this instance's clock (a lease's life
        since the last renewal that succeeded), was reported lost, or a write was refused."""
        if self._run.fenced_out:
            return True
        if self.token is None:  # no lease: right only where nobody else runs conversations
            return self._instances.shared
        return not self._instances.fresh(self.token)

    def check(self, what: str) -> None:
        """`FencedOut` if stale (the run then stops quietly: `bots.runner.run`); the loop's
        own task is cancelled at once, so it starts nothing more."""
        if self.stale():
            self._run.fence_out(LEASE_LOST_TEXT)
            raise FencedOut(self.token.conversation_id if self.token else 0, what)

    def stop_if_stale(self) -> None:
        """Inside the loop's task: if stale, cancel the run (it ends `aborted`, which nobody
        is shown) and do not start what was about to start."""
        if self.stale():
            self._run.fence_out(LEASE_LOST_TEXT)
            raise asyncio.CancelledError


class FencedModel:
    """The run's model, asked only while the run's lease may still be this instance's."""

    def __init__(self, model: Model, fence: RunFence) -> None:
        self._model = model
        self._fence = fence

    @property
    def info(self) -> ModelInfo:
        return self._model.info

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self._fence.stop_if_stale()
        inner = self._model.stream(request)
        try:
            async for event in inner:
                yield event
        finally:  # closing this stream closes the model's request
            close = getattr(inner, "aclose", None)
            if close is not None:
                await close()


class _FencedTool(AgentTool[Any]):
    """A tool that starts only while the run's lease may still be this instance's."""

    def __init__(self, tool: AnyTool, fence: RunFence) -> None:
        self._tool = tool
        self._fence = fence

    async def execute(self, call_id: str, params: Any, ctx: ToolContext) -> ToolResult:
        self._fence.stop_if_stale()
        return await self._tool.execute(call_id, params, ctx)

    def spec(self) -> ToolSpec:
        return self._tool.spec()

    def summarize(self, params: Any) -> str:
        return self._tool.summarize(params)


def fenced_tools(tools: Sequence[AnyTool], fence: RunFence) -> list[AnyTool]:
    """`tools`, each starting only while the lease may still be ours (as they are, without a
    lease token)."""
    if fence.token is None:
        return list(tools)
    return [_fenced(tool, fence) for tool in tools]


def _fenced(tool: AnyTool, fence: RunFence) -> AnyTool:
    # A class of its own per tool: the loop reads a tool's name, mode and timeout from it.
    facts = {
        "name": tool.name,
        "label": tool.label,
        "description": tool.description,
        "parameters": tool.parameters,
        "execution_mode": tool.execution_mode,
        "timeout_s": tool.timeout_s,
    }
    fenced: type[_FencedTool] = type(f"Fenced{type(tool).__name__}", (_FencedTool,), facts)
    return fenced(tool, fence)
