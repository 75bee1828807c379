"""What `teammate mcp list` prints and what `teammate doctor` checks about MCP servers.

Owns: starting every configured server once (all at once, each within its start timeout),
turning `tools.mcp.ServerReport`s into lines for people, and flagging a channel that names a
server `[mcp.servers]` does not configure. Secrets never appear: errors come redacted from
`tools.mcp_client`, and only variable names are ever shown.

Must not: write SQL or know a chat platform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TextIO

from bots.settings import Settings

if TYPE_CHECKING:
    from tools.mcp import ServerReport

Status = Literal["ok", "info", "warn", "fail"]


async def inspect_servers(settings: Settings) -> list[ServerReport]:
    from tools.mcp import McpHub  # (here: the MCP SDK loads only for these reports)

    hub = McpHub(settings.mcp, cache_dir=settings.data_dir)
    try:
        return await hub.inspect()
    finally:
        await hub.aclose()


def unknown_servers(settings: Settings) -> list[str]:
    """`where: name` for each `mcp_servers` entry that names no configured server."""
    configs = [("tools", settings.tools)] + [
        (f"channels.{key}.tools", channel.tools)
        for key, channel in settings.channels.items()
        if channel.tools is not None
    ]
    return [
        f"{where}.mcp_servers: {name}"
        for where, tools in configs
        for name in tools.mcp_servers or []
        if name not in settings.mcp.servers
    ]


async def print_mcp_list(settings: Settings, out: TextIO) -> int:
    """Each server, whether it starts, and its tools; 1 if any did not start."""
    if not settings.mcp.servers:
        out.write("No MCP servers are configured (add [mcp.servers.NAME] to teammate.toml).\n")
        return 0
    reports = await inspect_servers(settings)
    for report in reports:
        state = "started" if report.started else "did not start"
        out.write(f"{report.name} ({report.transport}): {state}: {report.detail}\n")
        for name in report.tools:
            out.write(f"  {name}\n")
        if report.hidden:
            out.write(f"  removed by allow_tools/deny_tools: {', '.join(report.hidden)}\n")
    for problem in unknown_servers(settings):
        out.write(f"warning: {problem} is not in [mcp.servers]\n")
    return 0 if all(report.started for report in reports) else 1


async def check_mcp(settings: Settings, report: Callable[[Status, str, str], None]) -> None:
    """Doctor's lines: one per server (fail when it does not start), unknown names warned."""
    for problem in unknown_servers(settings):
        report("warn", "mcp", f"{problem} is not in [mcp.servers]")
    if not settings.mcp.servers:
        report("info", "mcp", "no MCP servers configured")
        return
    for found in await inspect_servers(settings):
        name = f"mcp {found.name}"
        if not found.started:
            report("fail", name, f"{found.transport}: does not start: {found.detail}")
            continue
        listing = ", ".join(found.tools) if found.tools else "no tools"
        report("ok", name, f"{found.transport}: {found.detail}: {listing}")
