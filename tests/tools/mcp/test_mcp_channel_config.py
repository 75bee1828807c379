"""A channel's stored tool list (`/teammate config tools …`) names MCP servers and their tools
the way the file's `mcp_servers` does, checked against the servers the file gives the channel;
through Slack's `/teammate` on the real bolt app and runner, with a real stdio MCP server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.features.channel_config import ConfigChange, apply_change, keeps_tool
from bots.settings import ChannelConfig, Settings
from core.messages import Text, ToolCall, ToolResultMessage
from core.models.scripted import Reply, ScriptedModel
from core.tools import AnyTool
from tests.bots.platforms.slack.conftest import fake_slack  # noqa: F401 - the fixture, for these tests
from tests.bots.platforms.slack.e2e_harness import ALICE
from tests.bots.platforms.slack.test_commands import running
from tests.fakes.slack_server import FakeSlack
from tests.tools.mcp.conftest import REPO, START_GUARD_S, stdio_command
from tools.files import LsTool, ReadTool
from tools.mcp import McpHub
from tools.mcp_config import McpServerConfig, McpSettings

MCP = McpSettings(
    servers={
        "local": McpServerConfig(command=stdio_command(), cwd=str(REPO)),
        "other": McpServerConfig(command=stdio_command(), cwd=str(REPO)),
    },
    first_list_wait_s=START_GUARD_S,
)


@pytest.fixture
async def mcp_tools(tmp_path: Path) -> AsyncIterator[list[AnyTool]]:
    """The `local` server's tools, listed by a real server (started, then reused)."""
    hub = McpHub(MCP, cache_dir=tmp_path, environ={})
    try:
        yield await hub.tools(["local"])
    finally:
        await hub.aclose()


def tool_names(request: Any) -> list[str]:
    return [tool.name for tool in request.tools]


async def test_stored_tools_name_mcp_servers_and_tools_and_a_run_calls_one(
    fake_slack: FakeSlack,  # noqa: F811
    tmp_path: Path,
    mcp_tools: list[AnyTool],
) -> None:
    tools: list[AnyTool] = [ReadTool(), LsTool(), *mcp_tools]
    listed = {tool.name for tool in mcp_tools}
    assert {"local__echo", "local__add"} <= listed
    echo = ToolCall(id="c1", name="local__echo", arguments={"text": "from the channel"})
    model = ScriptedModel(default=Reply(text="ok"))
    models = {"scripted": model}
    settings: dict[str, Any] = {"slack": {"admins": [ALICE]}, "mcp": MCP}
    async with running(fake_slack, tmp_path / "app", tools=tools, models=models, **settings) as app:
        shown = await app.command("config")
        assert "web_fetch, local, other (configuration file)" in shown["text"]

        # Only built-in tools: the MCP tools go, as before.
        assert "Saved" in (await app.command("config tools ls"))["text"]
        await app.mention("first")
        await app.runner.wait_all()
        assert tool_names(model.requests[-1]) == ["ls"]

        # A server by name brings all its tools back; one tool by its `server__tool` name.
        assert "Saved" in (await app.command("config tools ls,local"))["text"]
        await app.mention("second")
        await app.runner.wait_all()
        assert set(tool_names(model.requests[-1])) == {"ls", *listed}

        saved = await app.command("config tools ls local__echo")
        assert "• tools: ls, local__echo (set here)" in saved["text"]
        model.add(Reply(tool_calls=[echo]), Reply(text="done"))
        await app.mention("third")
        await app.runner.wait_all()
        calls = model.requests[-2:]
        assert tool_names(calls[0]) == ["ls", "local__echo"]
        (result,) = [m for m in calls[1].messages if isinstance(m, ToolResultMessage)]
        assert not result.is_error
        assert result.content == [Text(text="echo: from the channel")]

        # Checked against the configured servers: an unknown server or tool prefix is refused.
        for name in ("nowhere", "nowhere__echo", "local__", "bash"):
            refused = await app.command(f"config tools ls,{name}")
            assert f"Not allowed here: {name}." in refused["text"], name
        kept = await app.command("config")
        assert "• tools: ls, local__echo (set here)" in kept["text"]


def test_a_stored_server_must_be_one_the_file_gives_the_channel(tmp_path: Path) -> None:
    key = "slack:T1:C9"
    settings = Settings(
        data_dir=tmp_path,
        mcp=MCP,
        channels={key: {"tools": {"enabled": ["read"], "mcp_servers": ["local"]}}},
    )
    problem, _ = apply_change(settings, key, ChannelConfig(), ConfigChange(tools="read,other"))
    assert problem.startswith("Not allowed here: other.")
    assert "allows: read, local" in problem
    problem, changed = apply_change(
        settings, key, ChannelConfig(), ConfigChange(tools="local__echo read")
    )
    assert problem == "" and changed.tools == ("local__echo", "read")


def test_a_stored_list_keeps_a_tool_by_its_name_or_its_servers_name(
    mcp_tools: list[AnyTool],
) -> None:
    echo = next(tool for tool in mcp_tools if tool.name == "local__echo")
    add = next(tool for tool in mcp_tools if tool.name == "local__add")
    assert keeps_tool({"local"}, echo) and keeps_tool({"local"}, add)
    assert keeps_tool({"local__echo"}, echo) and not keeps_tool({"local__echo"}, add)
    assert not keeps_tool({"other", "read"}, echo)
    assert keeps_tool({"read"}, ReadTool()) and not keeps_tool({"local"}, ReadTool())
