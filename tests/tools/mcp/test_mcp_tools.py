"""MCP tools below the CLI: names, schemas and results fitted for the model, configuration,
and the server lifecycle against real servers (`server_app` over stdio, and hostile ones)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from aiohttp import web
from pydantic import ValidationError

from core.messages import Image, Text
from core.tools import CancelSignal, ToolContext, ToolError
from tests.tools.mcp.conftest import REPO, START_GUARD_S, free_port, stdio_command
from tests.tools.mcp.server_app import PNG_1X1
from tests.waiting import eventually
from tools.mcp import McpHub
from tools.mcp_client import McpCallFailed, McpServer, McpUnavailable, Redactor, backoff_s
from tools.mcp_config import McpConfigError, McpServerConfig, McpSettings, resolve_env
from tools.mcp_tools import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    listed_tools,
    result_content,
    tool_name,
)

NO_SECRETS = Redactor(())


def remote_tool(name: str, schema: Any = None, description: str = "d") -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        description=description,
        input_schema=schema if schema is not None else {"type": "object", "properties": {}},
    )


def local_server(*extra: str, **config: Any) -> McpServerConfig:
    return McpServerConfig(command=stdio_command(*extra), cwd=str(REPO), **config)


# -- names, schemas, results ----------------------------------------------------------------------


def test_tool_names_are_prefixed_fitted_to_the_pattern_and_distinct() -> None:
    assert tool_name("gh", "search_issues", set()) == "gh__search_issues"
    assert tool_name("gh", "repo.list/all", set()) == "gh__repo_list_all"
    clash = tool_name("gh", "a.b", {"gh__a_b"})
    assert clash.startswith("gh__a_b_") and clash != "gh__a_b"
    long = tool_name("server", "x" * 200, set())
    assert len(long) == MAX_NAME_CHARS
    other = tool_name("server", "x" * 199 + "y", {long})
    assert other != long and len(other) == MAX_NAME_CHARS


def test_listed_tools_bound_descriptions_and_schemas() -> None:
    huge_schema = {
        "type": "object",
        "properties": {f"p{n}": {"type": "string", "description": "x" * 100} for n in range(300)},
    }
    tools = listed_tools(
        "s",
        [
            remote_tool("ok", {"type": "object", "properties": {"q": {"type": "string"}}}),
            remote_tool("wordy", description="w" * 10_000),
            remote_tool("huge", huge_schema),
            remote_tool("array", {"type": "array"}),
            remote_tool("n" * 129),
            remote_tool("same.name"),
            remote_tool("same_name"),
        ],
    )
    by_remote = {tool.remote_name: tool for tool in tools}
    assert "n" * 129 not in by_remote  # a name over 128 characters is skipped
    assert by_remote["ok"].input_schema["properties"]["q"] == {"type": "string"}
    assert len(by_remote["wordy"].description) == MAX_DESCRIPTION_CHARS
    assert by_remote["huge"].input_schema == {"type": "object", "properties": {}}
    assert "too large to pass on" in by_remote["huge"].description
    assert by_remote["array"].input_schema == {"type": "object", "properties": {}}
    names = [tool.name for tool in tools]
    assert len(set(names)) == len(names)


async def test_results_are_truncated_and_images_and_resources_made_safe() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="\n".join(f"line {n}" for n in range(5000))),
            mcp_types.ImageContent(
                type="image", data=base64.b64encode(PNG_1X1).decode(), mime_type="image/png"
            ),
            mcp_types.ImageContent(type="image", data="bm90IGFuIGltYWdl", mime_type="image/png"),
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.BlobResourceContents(
                    uri="file:///x.bin", blob=base64.b64encode(b"\0" * 3000).decode()
                ),
            ),
        ]
    )
    content, details = await result_content(result, NO_SECRETS)
    assert details["truncated"] is True
    text = content[0]
    assert isinstance(text, Text)
    assert text.text.startswith("line 0\nline 1\n")
    assert "[Output truncated: 2000 of " in text.text
    assert [type(part) for part in content] == [Text, Image]
    secret = Redactor(("line 4999",))
    tail = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="a\nline 4999\nb")]
    )
    [scrubbed], _ = await result_content(tail, secret)
    assert isinstance(scrubbed, Text) and scrubbed.text == "a\n***\nb"

    small = mcp_types.CallToolResult(content=result.content[2:])
    [notes], _ = await result_content(small, NO_SECRETS)
    assert isinstance(notes, Text)
    assert "[image omitted: not a recognised image format]" in notes.text
    assert "[binary resource file:///x.bin, about 2.9 KB: not shown]" in notes.text


# -- configuration --------------------------------------------------------------------------------


def test_configuration_names_variables_and_never_echoes_a_value() -> None:
    with pytest.raises(ValidationError, match="either command"):
        McpServerConfig(command=["x"], url="http://127.0.0.1/mcp")
    with pytest.raises(ValidationError, match="must not hold credentials"):
        McpServerConfig(url="https://user:pw@example.test/mcp")
    pasted = "ghp_abc.def-123"
    with pytest.raises(ValidationError) as refused:
        McpServerConfig(command=["x"], env={"TOKEN": pasted})
    # What settings print (bots.settings.load_settings): the message, not the input.
    [error] = refused.value.errors(include_input=False, include_url=False)
    assert pasted not in str(error) and "must be a name like MY_VARIABLE" in error["msg"]
    with pytest.raises(ValidationError, match="server name"):
        McpSettings.model_validate({"servers": {"bad name": {"command": ["x"]}}})

    config = McpServerConfig(command=["x"], env={"TOKEN": "MY_TOKEN"})
    assert resolve_env(config, {"MY_TOKEN": "v4lue"}) == {"TOKEN": "v4lue"}
    with pytest.raises(McpConfigError, match=re.escape("MY_TOKEN (for env.TOKEN) is not set")):
        resolve_env(config, {})
    settings = McpSettings(servers={"a": config})
    assert settings.secret_values({"MY_TOKEN": "v4lue"}) == ["v4lue"]


# -- the lifecycle against real servers -----------------------------------------------------------


async def test_a_hanging_call_times_out_and_the_server_keeps_answering() -> None:
    server = McpServer("local", local_server(call_timeout_s=1), environ={})
    try:
        assert await server.wait_ready(START_GUARD_S)
        with pytest.raises(McpCallFailed, match="did not answer within 1 s"):
            await server.call("hang", {}, signal=CancelSignal())
        answer = await server.call("echo", {"text": "still here"}, signal=CancelSignal())
        assert answer.content[0] == mcp_types.TextContent(type="text", text="echo: still here")
        assert server.starts == 1
    finally:
        await server.aclose()


async def test_a_call_observes_the_runs_cancel_signal() -> None:
    server = McpServer("local", local_server(), environ={})
    try:
        assert await server.wait_ready(START_GUARD_S)
        signal = CancelSignal()
        call = asyncio.ensure_future(server.call("hang", {}, signal=signal))
        await asyncio.sleep(0.05)
        signal.cancel("Stopped by a person.")
        with pytest.raises(
            McpCallFailed, match=re.escape("The call was stopped: Stopped by a person.")
        ):
            await asyncio.wait_for(call, START_GUARD_S)
    finally:
        await server.aclose()


async def test_calls_at_once_each_get_their_own_answer() -> None:
    # Requests are written from the callers' tasks and answers read by the session's one
    # receive loop: no answer may reach the wrong caller, none may be lost.
    server = McpServer("local", local_server(), environ={})
    try:
        assert await server.wait_ready(START_GUARD_S)
        texts = [f"call {n}" for n in range(40)]
        answers = await asyncio.gather(
            *(server.call("echo", {"text": text}, signal=CancelSignal()) for text in texts)
        )
        assert [a.content[0] for a in answers] == [
            mcp_types.TextContent(type="text", text=f"echo: {text}") for text in texts
        ]
    finally:
        await server.aclose()


async def test_a_call_cancelled_from_outside_stays_cancelled_and_the_server_answers_on() -> None:
    # The loop cancels a tool's task when a run stops: that must not be turned into a result.
    server = McpServer("local", local_server(), environ={})
    try:
        assert await server.wait_ready(START_GUARD_S)
        call = asyncio.ensure_future(server.call("hang", {}, signal=CancelSignal()))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        answer = await server.call("echo", {"text": "on"}, signal=CancelSignal())
        assert answer.content[0] == mcp_types.TextContent(type="text", text="echo: on")
        assert server.starts == 1
    finally:
        await server.aclose()


async def test_a_server_that_closes_its_input_is_stopped_with_a_reason() -> None:
    # It reads no request: without this, its start (or a call) would wait for its deadline.
    closes = "import os, time; time.sleep(0.3); os.close(0); time.sleep(60)"
    config = McpServerConfig(command=[sys.executable, "-c", closes], start_timeout_s=100)
    server = McpServer("deaf", config, environ={})
    try:
        assert not await server.wait_ready(START_GUARD_S)
        assert server.last_error == "it closed its input"
    finally:
        await server.aclose()


async def test_a_server_that_changes_its_tools_is_listed_again_without_a_restart(
    tmp_path: Path,
) -> None:
    settings = McpSettings(servers={"local": local_server()}, first_list_wait_s=START_GUARD_S)
    hub = McpHub(settings, cache_dir=tmp_path, environ={})
    server = hub.servers["local"]
    ctx = ToolContext(call_id="c", workspace=tmp_path)
    try:
        tools = {tool.name: tool for tool in await hub.tools()}
        assert "local__fresh" not in tools
        learn = tools["local__learn"]
        await learn.execute("c", learn.parameters.model_validate({"name": "fresh"}), ctx)

        async def fresh_listed() -> bool:
            return "local__fresh" in {tool.name for tool in await hub.tools()}

        await eventually("the new tool", fresh_listed, START_GUARD_S)
        fresh = {tool.name: tool for tool in await hub.tools()}["local__fresh"]
        result = await fresh.execute("c", fresh.parameters.model_validate({}), ctx)
        assert result.content == [Text(text="learned fresh")]
        assert server.starts == 1 and server.relists == 1  # listed again, not reconnected
        cached = json.loads((tmp_path / "mcp-tools.json").read_text())["local"]["tools"]
        assert "local__fresh" in [tool["name"] for tool in cached]  # a new process knows it

        # A burst of announcements costs one list, not one each.
        many = {"name": "burst", "count": 20}
        await learn.execute("c", learn.parameters.model_validate(many), ctx)

        async def burst_listed() -> bool:
            names = {tool.name for tool in await hub.tools()}
            return {f"local__burst_{n}" for n in range(20)} <= names

        await eventually("the burst's tools", burst_listed, START_GUARD_S)
        assert 2 <= server.relists < 1 + 20
        assert server.starts == 1
    finally:
        await hub.aclose()


async def test_a_server_that_cannot_start_backs_off_and_says_when_it_retries() -> None:
    now = [100.0]
    config = McpServerConfig(command=["/nonexistent/mcp-server"])
    server = McpServer("gone", config, environ={}, clock=lambda: now[0])
    try:
        for _ in range(2):  # the first failure retries at once; the second waits
            with pytest.raises(McpUnavailable, match="cannot connect: FileNotFoundError"):
                await server.call("x", {}, signal=CancelSignal())
        with pytest.raises(McpUnavailable, match="it is tried again in 1 s"):
            await server.call("x", {}, signal=CancelSignal())
        assert server.state == "down"
        now[0] += 1.0
        with pytest.raises(McpUnavailable, match="FileNotFoundError"):
            await server.call("x", {}, signal=CancelSignal())
    finally:
        await server.aclose()
    assert [backoff_s(n) for n in (1, 2, 3, 4, 10)] == [0.0, 1.0, 2.0, 4.0, 60.0]


async def test_a_server_sending_an_oversized_message_is_cut_off_with_a_reason(
    tmp_path: Path,
) -> None:
    flood = "import sys; sys.stdout.write('x' * (9 * 1024 * 1024)); sys.stdout.flush()"
    config = McpServerConfig(
        command=[sys.executable, "-c", flood + "; import time; time.sleep(60)"]
    )
    server = McpServer("flood", config, environ={})
    try:
        assert not await server.wait_ready(START_GUARD_S)
        assert server.last_error == "it sent a message over 8192 KiB"
    finally:
        await server.aclose()


async def test_a_secret_in_the_servers_error_output_is_redacted() -> None:
    secret = "tok-3141592653"
    leak = "import os, sys; sys.stderr.write('token=' + os.environ['TOKEN'] + '\\n'); sys.exit(2)"
    config = McpServerConfig(command=[sys.executable, "-c", leak], env={"TOKEN": "LEAKY"})
    server = McpServer("leaky", config, environ={"LEAKY": secret})
    try:
        assert not await server.wait_ready(START_GUARD_S)
        assert server.last_error is not None
        assert "token=***" in server.last_error and secret not in server.last_error
    finally:
        await server.aclose()


async def test_tools_come_from_the_last_list_without_waiting_for_the_start(
    tmp_path: Path,
) -> None:
    settings = McpSettings(servers={"local": local_server()}, first_list_wait_s=START_GUARD_S)
    first = McpHub(settings, cache_dir=tmp_path, environ={})
    try:
        listed = await first.tools()
        assert "local__echo" in [tool.name for tool in listed]
    finally:
        await first.aclose()
    assert json.loads((tmp_path / "mcp-tools.json").read_text())["local"]["tools"]

    again = McpHub(settings, cache_dir=tmp_path, environ={})
    try:
        tools = {tool.name: tool for tool in await again.tools()}
        assert again.servers["local"].state == "starting"  # known, yet not waited for
        echo = tools["local__echo"]
        ctx = ToolContext(call_id="c", workspace=tmp_path)
        result = await echo.execute("c", echo.parameters.model_validate({"text": "hi"}), ctx)
        assert result.content == [Text(text="echo: hi")]
        with pytest.raises(ToolError, match="Error executing tool fail"):
            await tools["local__fail"].execute("c", echo.parameters.model_validate({}), ctx)
        assert await again.tools(["other"]) == []
    finally:
        await again.aclose()


async def test_an_http_server_sending_an_oversized_response_is_cut_off() -> None:
    async def answer(request: web.Request) -> web.Response:
        asked = await request.json()
        huge = "a" * (9 * 1024 * 1024)
        body = json.dumps({"jsonrpc": "2.0", "id": asked.get("id", 0), "result": {"x": huge}})
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/mcp", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    server = McpServer("big", McpServerConfig(url=f"http://127.0.0.1:{port}/mcp"), environ={})
    try:
        assert not await server.wait_ready(START_GUARD_S)
        assert server.last_error == "it sent a response over 8192 KiB"
    finally:
        await server.aclose()
        await runner.cleanup()


async def test_a_server_that_never_starts_delays_one_run_not_every_run(tmp_path: Path) -> None:
    stuck = local_server("--hang-on-start", start_timeout_s=1)
    settings = McpSettings(servers={"stuck": stuck}, first_list_wait_s=START_GUARD_S)
    hub = McpHub(settings, cache_dir=tmp_path, environ={})
    try:
        assert await hub.tools() == []  # waited for its first list: the start failed
        server = hub.servers["stuck"]
        assert server.state == "down"
        assert server.last_error == "it did not start within 1 s"
        assert await hub.tools() == []
        assert server.state == "starting"  # started again, and not waited for this time
    finally:
        await hub.aclose()
