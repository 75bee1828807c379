"""MCP servers through `teammate` as people run it: `ask`, `mcp list` and `doctor` as
subprocesses, the real `anthropic` SDK against the fake Messages API, and real MCP servers
(`server_app`, written with the `mcp` SDK) over stdio and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.bots.test_cli import cli_env, data_dir, fake, teammate
from tests.fakes.anthropic_server import FakeAnthropic, ToolUseOut, sse, text_reply
from tests.tools.mcp.conftest import server_toml, stdio_command

__all__ = ["data_dir", "fake"]  # fixtures

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def write_config(tmp_path: Path, *tables: str, wait_s: float = 60.0) -> Path:
    config = tmp_path / "teammate.toml"
    config.write_text(f"[mcp]\nfirst_list_wait_s = {wait_s}\n\n" + "\n".join(tables))
    return config


def calls(*steps: tuple[str, dict[str, Any]]) -> list[Any]:
    """One model turn per tool call, then a final answer."""
    replies: list[Any] = [
        sse(ToolUseOut(f"toolu_{n}", name, [json.dumps(args)]), stop_reason="tool_use")
        for n, (name, args) in enumerate(steps, 1)
    ]
    return [*replies, text_reply("Done.")]


def tool_result(fake: FakeAnthropic, request: int) -> dict[str, Any]:
    """The tool result the model was sent in request number `request`."""
    [block] = fake.bodies[request]["messages"][-1]["content"]
    assert block["type"] == "tool_result"
    return dict(block)


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


async def test_ask_calls_a_stdio_tool_with_env_from_a_variable_never_shown(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    secret = "s3cret-stdio-token-4242"
    table = server_toml("local", stdio_command(), 'env = { SERVER_TOKEN = "LOCAL_MCP_TOKEN" }')
    config = write_config(tmp_path, table)
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config), LOCAL_MCP_TOKEN=secret)
    fake.add(
        *calls(
            ("local__echo", {"text": "hello"}),
            ("local__whoami", {"variable": "SERVER_TOKEN"}),
            ("local__document", {}),
        )
    )

    done = await teammate("-v", "ask", "-c", "mcp", "use the tools", env=env, cwd=tmp_path)

    assert done.code == 0, done.err
    assert done.out == "Done.\n"
    offered = {tool["name"]: tool for tool in fake.bodies[0]["tools"]}
    assert all(TOOL_NAME.match(name) for name in offered)
    assert offered["local__echo"]["input_schema"]["properties"]["text"]["type"] == "string"
    assert offered["local__echo"]["input_schema"]["required"] == ["text"]
    assert result_text(tool_result(fake, 1)) == "echo: hello"
    # The server got the value (it echoes it back), and what it said is redacted.
    whoami = tool_result(fake, 2)
    assert result_text(whoami) == "***"
    assert "The plan: ship on Friday." in result_text(tool_result(fake, 3))
    log = (data_dir / "teammate.log").read_text()
    for text in (done.out, done.err, log, json.dumps(fake.bodies)):
        assert secret not in text

    # A new process knows the tools from the last list, and the server is started again.
    fake.add(*calls(("local__add", {"a": 2, "b": 3})))
    again = await teammate("ask", "-c", "mcp", "add them", env=env, cwd=tmp_path)
    assert again.code == 0, again.err
    assert result_text(tool_result(fake, 5)) == "5"


async def test_ask_calls_an_http_tool_with_a_header_from_a_variable(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path, http_server: str
) -> None:
    secret = "s3cret-http-header-9876"
    table = (
        f'[mcp.servers.remote]\nurl = "{http_server}"\nheaders = {{ X-Team-Key = "REMOTE_KEY" }}\n'
    )
    config = write_config(tmp_path, table)
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config), REMOTE_KEY=secret)
    fake.add(*calls(("remote__header", {"name": "x-team-key"}), ("remote__picture", {})))

    done = await teammate("-v", "ask", "read the header", env=env, cwd=tmp_path)

    assert done.code == 0, done.err
    assert result_text(tool_result(fake, 1)) == "***"  # it arrived, and is not repeated
    picture = tool_result(fake, 2)["content"]
    assert [part["type"] for part in picture] == ["image"]
    assert picture[0]["source"]["media_type"] == "image/png"
    log = (data_dir / "teammate.log").read_text()
    for text in (done.out, done.err, log, json.dumps(fake.bodies)):
        assert secret not in text


async def test_a_crashing_server_is_an_observation_and_is_restarted(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    config = write_config(tmp_path, server_toml("local", stdio_command()))
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config))
    fake.add(*calls(("local__pid", {}), ("local__crash", {}), ("local__pid", {})))

    done = await teammate("ask", "crash it", env=env, cwd=tmp_path)

    assert done.code == 0, done.err
    assert done.out == "Done.\n"
    first_pid = result_text(tool_result(fake, 1))
    crashed = tool_result(fake, 2)
    assert crashed["is_error"] is True
    assert "closed the connection" in result_text(crashed)
    assert "exited with status 3" in result_text(crashed)
    second_pid = result_text(tool_result(fake, 3))
    assert second_pid.isdigit() and first_pid.isdigit()
    assert second_pid != first_pid  # a new process answered


async def test_a_server_that_never_starts_does_not_block_the_answer(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    stuck = server_toml("stuck", stdio_command("--hang-on-start"), "call_timeout_s = 1")
    config = write_config(tmp_path, stuck, wait_s=0.5)
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config))
    fake.add(*calls(("stuck__echo", {"text": "anyone?"})))

    done = await teammate("ask", "hello", env=env, cwd=tmp_path)

    assert done.code == 0, done.err
    assert done.out == "Done.\n"
    assert "tools" not in fake.bodies[0] or not any(
        tool["name"].startswith("stuck__") for tool in fake.bodies[0]["tools"]
    )
    refused = tool_result(fake, 1)
    assert refused["is_error"] is True and "not available" in result_text(refused)


async def test_mcp_list_and_doctor_show_each_server_and_the_allow_list(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    local = server_toml(
        "local",
        stdio_command(),
        'allow_tools = ["echo", "pid", "add"]',
        'deny_tools = ["pid"]',
    )
    stuck = server_toml("stuck", stdio_command("--hang-on-start"), "start_timeout_s = 1")
    config = write_config(tmp_path, local, stuck)
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config))

    listed = await teammate("--model", "scripted", "mcp", "list", env=env, cwd=tmp_path)

    assert listed.code == 1, listed.out + listed.err  # one server does not start
    lines = listed.out.splitlines()
    # 11 tools: allow_tools keeps 3, deny_tools takes pid away.
    assert lines[0] == "local (stdio): started: 2 tool(s), 10 removed by the configuration"
    assert lines[1:3] == ["  local__echo", "  local__add"]
    assert lines[3].startswith("  removed by allow_tools/deny_tools: ")
    assert {"pid", "crash", "whoami"} <= set(lines[3].split(": ", 1)[1].split(", "))
    assert lines[4].startswith("stuck (stdio): did not start: it did not start within 1 s")

    doctor = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)
    assert doctor.code == 1
    assert "ok    mcp local: stdio: 2 tool(s), 10 removed by the configuration: " in doctor.out
    assert "local__echo, local__add" in doctor.out
    assert "fail  mcp stuck: stdio: does not start: it did not start within 1 s" in doctor.out

    # In a run, only the allowed tools are offered; a removed one is refused as unknown.
    fake.add(*calls(("local__pid", {})))
    done = await teammate("ask", "which pid?", env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    offered = [tool["name"] for tool in fake.bodies[0]["tools"] if "__" in tool["name"]]
    assert offered == ["local__echo", "local__add"]
    refused = tool_result(fake, 1)
    assert refused["is_error"] is True and "not available" in result_text(refused)
