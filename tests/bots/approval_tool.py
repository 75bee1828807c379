"""A tool that must be approved in the approvals tests (named in their `[approvals] tools`)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from core.tools import AgentTool, ToolContext, ToolResult


class DangerParams(BaseModel):
    command: str


class DangerTool(AgentTool[DangerParams]):
    """A tool that needs approval: records each command it ran."""

    name = "danger"
    label = "Danger"
    description = "Runs a command."
    parameters = DangerParams

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.started = asyncio.Event()

    async def execute(self, call_id: str, params: DangerParams, ctx: ToolContext) -> ToolResult:
        self.ran.append(params.command)
        self.started.set()
        return ToolResult.text(f"ran {params.command}")
