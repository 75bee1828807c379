"""The tool lists of MCP servers, kept on disk between runs and processes.

Owns: `ToolListCache`, a small JSON file (`<data dir>/mcp-tools.json`) holding each server's
last tool list (already fitted for the model, `tools.mcp_tools.ListedTool`) with the
fingerprint of the command or URL it came from. A run takes its MCP tools from here, so it
never waits for a server to start; a list from another command or URL is not used. The file is
read once, written whole (a temporary file renamed over it) off the event loop, and is bounded;
an unreadable or damaged file counts as empty.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tools.mcp_tools import ListedTool

log = logging.getLogger(__name__)

MAX_CACHE_BYTES = 8 * 1024 * 1024


class CachedList(BaseModel):
    model_config = ConfigDict(extra="ignore")

    fingerprint: str
    tools: list[ListedTool]


class ToolListCache:
    """Tool lists by server name. `path` None keeps them in memory only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lists: dict[str, CachedList] = {}
        self._loaded = path is None
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        async with self._lock:
            if self._loaded:
                return
            assert self.path is not None
            stored = await asyncio.to_thread(_read, self.path)
            # A list learnt meanwhile is newer than the file's.
            self._lists = stored | self._lists
            self._loaded = True

    def get(self, server: str, fingerprint: str) -> list[ListedTool] | None:
        found = self._lists.get(server)
        if found is None or found.fingerprint != fingerprint:
            return None
        return found.tools

    def remember(self, server: str, fingerprint: str, tools: list[ListedTool]) -> bool:
        """Keep a server's fresh list; True when it differs from the one kept."""
        entry = CachedList(fingerprint=fingerprint, tools=tools)
        if self._lists.get(server) == entry:
            return False
        self._lists[server] = entry
        return True

    async def save(self) -> None:
        if self.path is None:
            return
        async with self._lock:
            snapshot = {name: found.model_dump(mode="json") for name, found in self._lists.items()}
            try:
                await asyncio.to_thread(_write, self.path, snapshot)
            except OSError as exc:
                log.warning("cannot write the MCP tool cache %s: %s", self.path, exc)


def _read(path: Path) -> dict[str, CachedList]:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CACHE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("cannot read the MCP tool cache %s: %s", path, exc)
        return {}
    if len(data) > MAX_CACHE_BYTES:
        log.warning("the MCP tool cache %s is over its limit; ignored", path)
        return {}
    try:
        raw: Any = json.loads(data)
        return {str(name): CachedList.model_validate(entry) for name, entry in raw.items()}
    except (ValueError, AttributeError, ValidationError):
        log.warning("the MCP tool cache %s is damaged; ignored", path)
        return {}


def _write(path: Path, snapshot: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(snapshot, ensure_ascii=False).encode()
    if len(data) > MAX_CACHE_BYTES:
        log.warning("the MCP tool lists are over the cache's limit; not cached")
        return
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".mcp-tools-")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
