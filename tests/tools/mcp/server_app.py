"""An MCP server for the tests and the benchmark, written with the `mcp` SDK's server side.

Run as `python -m tests.tools.mcp.server_app stdio` (over stdin/stdout) or
`python -m tests.tools.mcp.server_app http --port N` (streamable HTTP on 127.0.0.1).

Tools: `echo` (text back), `add`, `whoami` (the value of an environment variable the client
was told to pass, to prove it arrived), `header` (a request header, HTTP only), `picture` (a
1x1 PNG), `document` (an embedded text resource), `big` (more text than a tool may return),
`fail` (an error result), `crash` (the process exits mid-call), `hang` (never answers),
`pid` (the server's process id, to tell a restarted server from the first), `learn` (adds
tools and announces each with `notifications/tools/list_changed`).

`--start-delay S` sleeps before serving (a slow-starting server); `--hang-on-start` never
answers the handshake; `--tools N` adds N more trivial tools (`extra_0` …).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import EmbeddedResource, TextResourceContents

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def build(extra_tools: int = 0) -> MCPServer:
    server = MCPServer("test-server", log_level="ERROR")

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="The value of an environment variable of the server process.")
    def whoami(variable: str) -> str:
        return os.environ.get(variable, "(unset)")

    @server.tool(description="A header of the HTTP request that carried this call.")
    def header(name: str, ctx: Context) -> str:
        request = ctx.request_context.request
        headers: Any = getattr(request, "headers", None)
        return str(headers.get(name, "(none)")) if headers is not None else "(not HTTP)"

    @server.tool(description="A tiny picture.")
    def picture() -> Image:
        return Image(data=PNG_1X1, format="png")

    @server.tool(description="A document as an embedded resource.")
    def document() -> EmbeddedResource:
        return EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="memo://plan", mime_type="text/plain", text="The plan: ship on Friday."
            ),
        )

    @server.tool(description="Many lines of text.")
    def big(lines: int) -> str:
        return "\n".join(f"line {n}" for n in range(lines))

    @server.tool(description="Always fails.")
    def fail() -> str:
        raise ValueError("this tool always fails")

    @server.tool(description="Exits the server process in the middle of the call.")
    def crash() -> str:
        sys.stdout.flush()
        os._exit(3)

    @server.tool(description="Never answers.")
    async def hang() -> str:
        await asyncio.sleep(3600)
        return "never"

    @server.tool(description="The server's process id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Adds tools (NAME, or NAME_0 … with count), announcing each.")
    async def learn(name: str, ctx: Context, count: int = 1) -> str:
        names = [name] if count == 1 else [f"{name}_{n}" for n in range(count)]
        for new in names:
            server.add_tool(lambda said=new: f"learned {said}", name=new, description="Learned.")
            await ctx.session.send_tool_list_changed()
        return f"learned {len(names)}"

    for n in range(extra_tools):
        server.add_tool(lambda x=n: f"extra {x}", name=f"extra_{n}", description="An extra tool.")
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--start-delay", type=float, default=0.0)
    parser.add_argument("--hang-on-start", action="store_true")
    parser.add_argument("--tools", type=int, default=0)
    args = parser.parse_args()
    if args.start_delay:
        time.sleep(args.start_delay)
    if args.hang_on_start:
        time.sleep(3600)
    server = build(args.tools)
    if args.transport == "stdio":
        asyncio.run(server.run_stdio_async())
    else:
        asyncio.run(server.run_streamable_http_async(host="127.0.0.1", port=args.port))


if __name__ == "__main__":
    main()
