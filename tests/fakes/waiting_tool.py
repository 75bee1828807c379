"""A tool that waits until its run is stopped, noting what its cancel signal said."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from core.tools import AgentTool, ToolContext, ToolResult


class WaitParams(BaseModel):
    pass


class WaitTool(AgentTool[WaitParams]):
    """Waits until cancelled and notes what its context said about the cancellation."""

    name = "wait"
    label = "Wait"
    description = "Waits until the run is stopped."
    parameters = WaitParams

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.saw: list[tuple[bool, str | None]] = []

    async def execute(self, call_id: str, params: WaitParams, ctx: ToolContext) -> ToolResult:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # What a tool with cleanup to do (kill a child, delete a temp file) relies on.
            self.saw.append((ctx.signal.cancelled, ctx.signal.reason))
            raise
        return ToolResult.text("never")
