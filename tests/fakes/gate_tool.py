"""A tool that holds its run inside a tool call until the test opens the gate."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from core.tools import AgentTool, ToolContext, ToolResult


class GateParams(BaseModel):
    pass


class GateTool(AgentTool[GateParams]):
    """`entered` is set once a run is inside it; it returns "through" once `opened` is set."""

    name = "gate"
    label = "Gate"
    description = "Wait for the gate."
    parameters = GateParams

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def execute(self, call_id: str, params: GateParams, ctx: ToolContext) -> ToolResult:
        self.entered.set()
        await self.opened.wait()
        return ToolResult.text("through")
