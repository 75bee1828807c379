"""A minimal MCP stdio server without the SDK, for the benchmark: it isolates the client's cost.

The SDK's stdio server hands every line it reads and writes to a worker thread (and runs a
plain-function tool in one too), which costs about as much CPU per call as the whole 2 ms
target. This server answers the same `echo` (listed with the same input and output schemas,
answered with the same content and structured content, so the client does the same work) from
one blocking loop over stdin, so a round trip through it is almost all client: our transport,
the SDK's client session, and the pipe. It speaks the handshake-era protocol: `initialize`,
`tools/list`, `tools/call`, `ping`; anything else is answered "method not found".

Run: `python -m tests.tools.mcp.line_server`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ECHO = {
    "name": "echo",
    "description": "Say the text back.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"title": "Text", "type": "string"}},
        "required": ["text"],
        "title": "echoArguments",
    },
    "outputSchema": {
        "type": "object",
        "properties": {"result": {"title": "Result", "type": "string"}},
        "required": ["result"],
        "title": "echoOutput",
    },
}


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one message; None for a notification."""
    if "id" not in request:
        return None
    method, params = request.get("method"), request.get("params") or {}
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "line-server", "version": "1"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": [ECHO]}
    elif method == "tools/call" and params.get("name") == "echo":
        text = f"echo: {(params.get('arguments') or {}).get('text', '')}"
        reply["result"] = {
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"result": text},
            "isError": False,
        }
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
    return reply


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        reply = answer(json.loads(line))
        if reply is not None:
            out.write(json.dumps(reply).encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    main()
