"""MCP tool servers in a channel's toolset: the servers of one process and their tools.

Owns: `McpHub`, which holds one `McpServer` per configured server (`tools.mcp_config`) for the
life of the process, hands a run the tools of the servers its channel uses (`tools`), reports
on every server for `teammate doctor` and `teammate mcp list` (`inspect`), and stops them all.

Why the toolset waits for nothing (the design choice): a run must not be delayed by a server
that starts slowly or not at all, yet the model can only call tools it was told about when the
run began. So a run gets a server's tools from the last list that server gave (kept on disk in
`tools.mcp_cache`, so a new process knows them too), and building a toolset only *starts* the
server in the background (lazily: a server no channel uses never starts). A call made while
the server is still starting waits for it, within that call's own deadline. Only a server
whose tools were never listed at all makes a run wait, at most `first_list_wait_s` (default
5 s; 0: never) and once per process, so that the first question after configuring a server can
use it while a server that never starts delays one run, not every run.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mcp_types

from core.tools import AnyTool
from tools.mcp_cache import ToolListCache
from tools.mcp_client import McpServer
from tools.mcp_config import McpSettings
from tools.mcp_tools import ListedTool, listed_tools, make_tool

log = logging.getLogger(__name__)

CACHE_FILE_NAME = "mcp-tools.json"


@dataclass(slots=True)
class ServerReport:
    """One server as doctor and `mcp list` show it."""

    name: str
    transport: str
    started: bool
    detail: str  # the tool count, or why it did not start
    tools: list[str] = field(default_factory=list)  # our names, allowed ones only
    hidden: list[str] = field(default_factory=list)  # the server's names the config removes


class McpHub:
    """The configured MCP servers of this process."""

    def __init__(
        self,
        settings: McpSettings,
        *,
        cache_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self._cache = ToolListCache(cache_dir / CACHE_FILE_NAME if cache_dir else None)
        environ = dict(os.environ) if environ is None else environ
        self._servers = {
            name: McpServer(name, config, environ=environ, on_listed=self._listed)
            for name, config in settings.servers.items()
        }
        self._writes: set[asyncio.Task[None]] = set()
        self._waited: set[str] = set()  # servers a run already waited for, never again

    @property
    def servers(self) -> dict[str, McpServer]:
        return self._servers

    def _listed(self, server: McpServer, tools: list[mcp_types.Tool]) -> None:
        fitted = listed_tools(server.name, tools)
        if self._cache.remember(server.name, server.config.fingerprint(), fitted):
            write = asyncio.ensure_future(self._cache.save())
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)

    def _known(self, server: McpServer) -> list[ListedTool] | None:
        return self._cache.get(server.name, server.config.fingerprint())

    async def tools(self, names: Sequence[str] | None = None) -> list[AnyTool]:
        """The allowed tools of the named servers (None: every server), from their last
        lists; starts those servers in the background. Waits only for a server never listed
        before, at most `first_list_wait_s`."""
        chosen = [
            self._servers[name]
            for name in (self._servers if names is None else names)
            if name in self._servers
        ]
        if not chosen:
            return []
        await self._cache.load()
        for server in chosen:
            server.start_soon()
        unknown = [
            server
            for server in chosen
            if self._known(server) is None and server.name not in self._waited
        ]
        self._waited.update(server.name for server in unknown)
        if unknown and self.settings.first_list_wait_s > 0:
            wait_s = self.settings.first_list_wait_s
            await asyncio.wait([asyncio.ensure_future(s.wait_ready(wait_s)) for s in unknown])
        found: list[AnyTool] = []
        for server in chosen:
            for listed in self._known(server) or []:
                if server.config.allows(listed.remote_name):
                    found.append(make_tool(server, listed))
        return found

    async def inspect(self, timeout_s: float | None = None) -> list[ServerReport]:
        """Start every server (all at once), wait for each up to its start timeout, and
        report what it offers."""
        await self._cache.load()

        async def one(server: McpServer) -> ServerReport:
            wait = timeout_s if timeout_s is not None else server.config.start_timeout_s
            started = await server.wait_ready(wait)
            transport = server.config.transport
            if not started:
                why = server.last_error or f"it did not start within {wait:g} s"
                return ServerReport(server.name, transport, False, why)
            fitted = listed_tools(server.name, server.listed or [])
            allowed = [t.name for t in fitted if server.config.allows(t.remote_name)]
            hidden = [t.remote_name for t in fitted if not server.config.allows(t.remote_name)]
            detail = f"{len(allowed)} tool(s)" + (
                f", {len(hidden)} removed by the configuration" if hidden else ""
            )
            return ServerReport(server.name, transport, True, detail, allowed, hidden)

        return list(await asyncio.gather(*(one(s) for s in self._servers.values())))

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self._servers.values()))
        if self._writes:
            await asyncio.wait(list(self._writes))
