"""Real MCP servers for the tests: `server_app` over stdio, and over streamable HTTP in its own
process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SERVER_MODULE = "tests.tools.mcp.server_app"
START_GUARD_S = 60.0  # a hang guard, not a speed check: the machine is shared


def stdio_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", SERVER_MODULE, "stdio", *extra]


def server_toml(name: str, command: list[str], *lines: str) -> str:
    """A `[mcp.servers.NAME]` table for a stdio server run from the repository."""
    body = [
        f"[mcp.servers.{name}]",
        f"command = {json.dumps(command)}",
        f"cwd = {json.dumps(str(REPO))}",
    ]
    return "\n".join([*body, *lines]) + "\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """The test server over streamable HTTP; yields its URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        SERVER_MODULE,
        "http",
        "--port",
        str(port),
        cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(START_GUARD_S):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.1)
                    continue
                writer.close()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        await process.wait()
