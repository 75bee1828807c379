"""What an MCP tool server costs: per call, at start, and to an answer that uses none of it.

1. Per-call overhead = an MCP tool's round trip minus the same tool built in. The same `echo`
   tool, built in (an `AgentTool` in this process) and as an MCP tool over stdio reached
   through `tools.mcp` (our stdio transport and the SDK's client session), each called
   through `AgentTool.execute` CALLS times in a row after a warm-up, ROUNDS times,
   alternating; a figure is the median of the rounds' medians. Two servers:
   - `tests.tools.mcp.line_server`: the same tool (same schemas, same result, so the client
     does the same work) answered by a lean server, one blocking loop over stdin. The
     round trip is then what MCP itself costs: the protocol, the pipe, both processes'
     wake-ups and Teammate's client. That is the headline, `mcp_call_overhead_ms`: the
     overhead a tool pays for being reached over MCP rather than built in.
   - `tests.tools.mcp.server_app`, written with the `mcp` SDK's MCPServer (what a Python
     team's server is likely to be). Its own work is part of the tool, like a slow tool's:
     the SDK's stdio server hands every line it reads and writes to a worker thread, runs
     a plain-function tool in one too, and spawns a task per request.
   To tell the client's share from the server's, each server is also driven by a raw line
   client (no SDK client session, no Teammate: write a JSON line, read one): its round trip
   is the floor for that server, which no client can go below. Teammate's share of a round
   trip is its round trip minus that floor.
   CPU per call is read for both processes (ours: `time.process_time`; the server's: /proc).
2. Time to first tool list with SERVERS (5) servers started at once, from a cold cache: the
   wall time until `McpHub.tools()` returns every server's tools. SDK servers (each a Python
   process importing the SDK: most of the time is theirs), and lean servers (the client's
   part: starting processes, handshakes, lists).
3. Time to an answer that uses no MCP tool (`teammate ask` path: `open_app` + `run_ask`,
   scripted model), with no MCP server, with a server that takes START_DELAY s to start whose
   tools are cached (every run after the first), and the first time ever (no cached list:
   bounded by `first_list_wait_s`).

Run: uv run python -m benchmarks.mcp_overhead [--calls 500] [--rounds 5] [--servers 5]
     [--start-delay 3]
Prints conditions and a table; last, one JSON line with `mcp_call_overhead_ms` (lean server),
`mcp_call_overhead_ms_sdk_server`, each server's floor (`*_floor_ms`), Teammate's share
(`teammate_share_ms*`), the CPU per call of each side, `first_tool_list_s_5_servers`,
`answer_s_no_mcp`, `answer_s_slow_server_cached`, `answer_s_slow_server_first_time`.
Targets: overhead under 2 ms on stdio; the cached answer no slower than without MCP (a
server's start delays no answer that uses no MCP tool). The machine is shared and a VM: an
idle one wakes its cores slowly, so a round trip between processes is slower on an idle
machine than on a busy one. The conditions line gives the load average; run it more than once.
A measurement, not a test: CI does not run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/mcp_overhead.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import io
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from bots.app import open_app
from bots.platforms.terminal.surface import TERMINAL_RULES, run_ask
from bots.settings import Settings
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from tools.mcp import McpHub
from tools.mcp_config import McpServerConfig, McpSettings

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, "-m", "tests.tools.mcp.server_app", "stdio"]
MINIMAL_SERVER = [sys.executable, "-m", "tests.tools.mcp.line_server"]
LIST_WAIT_S = 60.0  # a hang guard for the runs that must wait for a list
RAW_PROTOCOL = "2025-11-25"  # the raw client's handshake: the last handshake-era version


class EchoParams(BaseModel):
    text: str


class EchoTool(AgentTool[EchoParams]):
    name = "echo"
    label = "Echo"
    description = "Say the text back."
    parameters = EchoParams

    async def execute(self, call_id: str, params: EchoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(f"echo: {params.text}")


def server(*extra: str) -> McpServerConfig:
    return McpServerConfig(command=[*SERVER, *extra], cwd=str(ROOT))


def minimal_server() -> McpServerConfig:
    return McpServerConfig(command=MINIMAL_SERVER, cwd=str(ROOT))


@dataclass(slots=True)
class CallTimes:
    median_ms: float
    min_ms: float
    cpu_ms: float  # this process's CPU time per call
    server_cpu_ms: float  # the server process's, for an MCP tool


def process_cpu_s(pid: int | None) -> float:
    """CPU time (user + system) a process has used, from /proc; 0 where unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(call: Callable[[], Awaitable[object]], calls: int, pid: int | None) -> CallTimes:
    """`call` `calls` times in a row after a warm-up: wall time per call, and each side's CPU."""
    for _ in range(min(50, calls)):  # warm-up
        await call()
    samples = []
    cpu, server_cpu = time.process_time(), process_cpu_s(pid)
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    cpu = (time.process_time() - cpu) * 1000 / calls
    server_cpu = (process_cpu_s(pid) - server_cpu) * 1000 / calls
    return CallTimes(statistics.median(samples), min(samples), cpu, server_cpu)


async def call_times(tool: AnyTool, calls: int, workspace: Path, pid: int | None) -> CallTimes:
    ctx = ToolContext(call_id="bench", workspace=workspace)
    params = tool.parameters.model_validate({"text": "hello"})

    async def call() -> None:
        result = await tool.execute("bench", params, ctx)
        assert result.content, "an empty result"

    return await timed(call, calls, pid)


async def mcp_call_times(config: McpServerConfig, calls: int, workspace: Path) -> CallTimes:
    hub = McpHub(McpSettings(servers={"bench": config}, first_list_wait_s=LIST_WAIT_S))
    try:
        tools = {tool.name: tool for tool in await hub.tools()}
        pid = hub.servers["bench"].pid
        return await call_times(tools["bench__echo"], calls, workspace, pid)
    finally:
        await hub.aclose()


async def raw_call_times(command: list[str], calls: int) -> CallTimes:
    """The same call from a raw line client: write a JSON line, read the answer's line; no SDK
    session and nothing of ours. Its round trip is the server's floor: no client goes lower."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
        limit=1024 * 1024,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def exchange(request: dict[str, Any]) -> dict[str, Any]:
        stdin.write(json.dumps(request).encode() + b"\n")
        await stdin.drain()
        while line := await stdout.readline():
            reply: dict[str, Any] = json.loads(line)
            if reply.get("id") == request["id"]:
                return reply
        raise RuntimeError(f"the server ended its output (status {await process.wait()})")

    hello = {"name": "raw", "version": "1"}
    try:
        handshake = {"protocolVersion": RAW_PROTOCOL, "capabilities": {}, "clientInfo": hello}
        await exchange({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": handshake})
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        arguments = {"name": "echo", "arguments": {"text": "hello"}}
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": arguments}

        async def call() -> None:
            reply = await exchange(request)
            assert reply["result"]["content"][0]["text"] == "echo: hello", reply

        return await timed(call, calls, process.pid)
    finally:
        stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 5.0)
        except TimeoutError:
            process.kill()
            await process.wait()


def median_of(rounds: list[CallTimes]) -> CallTimes:
    return CallTimes(
        statistics.median(r.median_ms for r in rounds),
        min(r.min_ms for r in rounds),
        statistics.median(r.cpu_ms for r in rounds),
        statistics.median(r.server_cpu_ms for r in rounds),
    )


@dataclass(slots=True)
class Overhead:
    builtin: CallTimes
    lean: CallTimes  # the lean server through Teammate
    lean_floor: CallTimes  # the lean server from a raw line client
    sdk: CallTimes  # the SDK's server through Teammate
    sdk_floor: CallTimes  # the SDK's server from a raw line client


async def call_overhead(calls: int, rounds: int, workspace: Path) -> Overhead:
    """Each way of calling, the median of `rounds` alternating runs."""
    measured: dict[str, list[CallTimes]] = {field: [] for field in Overhead.__slots__}
    for _ in range(rounds):
        measured["builtin"].append(await call_times(EchoTool(), calls, workspace, None))
        measured["lean"].append(await mcp_call_times(minimal_server(), calls, workspace))
        measured["lean_floor"].append(await raw_call_times(MINIMAL_SERVER, calls))
        measured["sdk"].append(await mcp_call_times(server(), calls, workspace))
        measured["sdk_floor"].append(await raw_call_times(SERVER, calls))
    return Overhead(**{field: median_of(runs) for field, runs in measured.items()})


async def first_tool_list_s(servers: int, config: Callable[[], McpServerConfig]) -> float:
    configs = {f"s{n}": config() for n in range(servers)}
    hub = McpHub(McpSettings(servers=configs, first_list_wait_s=LIST_WAIT_S))
    try:
        began = time.perf_counter()
        tools = await hub.tools()
        took = time.perf_counter() - began
    finally:
        await hub.aclose()
    listed = {tool.name.split("__")[0] for tool in tools}
    assert listed == set(configs), f"only {sorted(listed)} listed"
    return took


async def answer_s(data_dir: Path, mcp: McpSettings) -> float:
    settings = Settings(data_dir=data_dir, model="scripted", mcp=mcp)
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    async with open_app(settings, platform_rules=TERMINAL_RULES) as app:
        code = await run_ask(app, "bench", "hello", out=out, err=err)
        took = time.perf_counter() - began  # the answer is out; closing is not waited for
    assert code == 0 and "scripted model" in out.getvalue(), err.getvalue()
    return took


async def answers(start_delay: float, repeats: int, base: Path) -> dict[str, float]:
    slow = {"slow": server("--start-delay", str(start_delay))}
    await answer_s(base / "warm-up", McpSettings())  # imports, first database
    no_mcp = [answer_s(base / f"none-{n}", McpSettings()) for n in range(repeats)]
    figures = {"answer_s_no_mcp": statistics.median([await run for run in no_mcp])}
    cached_dir = base / "cached"
    filler = McpHub(McpSettings(servers=slow, first_list_wait_s=LIST_WAIT_S), cache_dir=cached_dir)
    try:
        await filler.tools()  # what an earlier run left: the slow server's tool list
    finally:
        await filler.aclose()
    cached = [
        await answer_s(cached_dir, McpSettings(servers=slow, first_list_wait_s=LIST_WAIT_S))
        for _ in range(repeats)
    ]
    figures["answer_s_slow_server_cached"] = statistics.median(cached)
    first = [await answer_s(base / f"first-{n}", McpSettings(servers=slow)) for n in range(repeats)]
    figures["answer_s_slow_server_first_time"] = statistics.median(first)
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--start-delay", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"conditions: python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load:.1f}; {args.calls} calls per tool "
        f"(median), {args.rounds} rounds (median of medians); {args.servers} stdio "
        f"servers at once; a slow server starts in "
        f"{args.start_delay:g} s; answers: scripted model, median of {args.repeats}, "
        "first_list_wait_s 5 (the default)"
    )
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as scratch:
        base = Path(scratch)
        measured = await call_overhead(args.calls, args.rounds, base)
        listed_s = await first_tool_list_s(args.servers, server)
        listed_lean_s = await first_tool_list_s(args.servers, minimal_server)
        answered = await answers(args.start_delay, args.repeats, base)
    builtin, lean, sdk = measured.builtin, measured.lean, measured.sdk
    overhead = lean.median_ms - builtin.median_ms
    sdk_overhead = sdk.median_ms - builtin.median_ms
    lean_share = lean.median_ms - measured.lean_floor.median_ms
    sdk_share = sdk.median_ms - measured.sdk_floor.median_ms

    def times(of: CallTimes) -> str:
        return f"{of.median_ms:.3f} / {of.min_ms:.3f}"

    def cpu(of: CallTimes) -> str:
        return f"{of.cpu_ms:.3f} / {of.server_cpu_ms:.3f}"

    rows = [
        ("built-in echo, ms per call: median / min", times(builtin)),
        ("lean server (tests/tools/mcp/line_server.py):", ""),
        ("  through Teammate, ms per call: median / min", times(lean)),
        ("  MCP call overhead (median), ms; target < 2", f"{overhead:.3f}"),
        ("  CPU per call: Teammate / server, ms", cpu(lean)),
        ("  floor (raw line client), ms per call: median / min", times(measured.lean_floor)),
        ("  Teammate's share (through Teammate - floor), ms", f"{lean_share:.3f}"),
        ("SDK server (MCPServer, the SDK's stdio transport):", ""),
        ("  through Teammate, ms per call: median / min", times(sdk)),
        ("  MCP call overhead with this server (median), ms", f"{sdk_overhead:.3f}"),
        ("  CPU per call: Teammate / server, ms", cpu(sdk)),
        ("  floor (raw line client), ms per call: median / min", times(measured.sdk_floor)),
        ("  CPU per call at the floor: raw client / server, ms", cpu(measured.sdk_floor)),
        ("  Teammate's share (through Teammate - floor), ms", f"{sdk_share:.3f}"),
        (f"first tool list, {args.servers} SDK servers at once, s", f"{listed_s:.3f}"),
        (f"first tool list, {args.servers} lean servers at once, s", f"{listed_lean_s:.3f}"),
        ("answer, no MCP server, s", f"{answered['answer_s_no_mcp']:.3f}"),
        (
            "answer, slow server configured (tools cached), s",
            f"{answered['answer_s_slow_server_cached']:.3f}",
        ),
        (
            "answer, slow server never listed before, s",
            f"{answered['answer_s_slow_server_first_time']:.3f}",
        ),
    ]
    print(f"{'measure':<64} {'value':>17}")
    for label, value in rows:
        print(f"{label:<64} {value:>17}")
    figures = {
        "mcp_call_overhead_ms": round(overhead, 3),
        "mcp_call_overhead_ms_sdk_server": round(sdk_overhead, 3),
        "lean_server_floor_ms": round(measured.lean_floor.median_ms, 3),
        "sdk_server_floor_ms": round(measured.sdk_floor.median_ms, 3),
        "teammate_share_ms": round(lean_share, 3),
        "teammate_share_ms_sdk_server": round(sdk_share, 3),
        f"first_tool_list_s_{args.servers}_servers": round(listed_s, 3),
        f"first_tool_list_s_{args.servers}_lean_servers": round(listed_lean_s, 3),
        "builtin_call_ms": round(builtin.median_ms, 4),
        "mcp_call_ms": round(lean.median_ms, 3),
        "mcp_call_cpu_ms": round(lean.cpu_ms, 3),
        "mcp_call_ms_sdk_server": round(sdk.median_ms, 3),
        "mcp_call_cpu_ms_sdk_server": round(sdk.cpu_ms, 3),
        "sdk_server_cpu_ms": round(sdk.server_cpu_ms, 3),
        **{key: round(value, 3) for key, value in answered.items()},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
