"""Helpers shared by the tool tests."""

from __future__ import annotations

from pathlib import Path

from core.tools import ToolContext, ToolResult


def make_ctx(workspace: Path, call_id: str = "call-1") -> ToolContext:
    return ToolContext(call_id=call_id, workspace=workspace)


def text_of(result: ToolResult) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)
