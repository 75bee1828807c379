"""The default toolset: configuration decides which tools a channel gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tools.bash import BashTool, SandboxStatus
from tools.grep import GrepTool
from tools.toolset import BashConfig, ToolsConfig, WebFetchConfig, build_toolset
from tools.web_fetch import WebFetchTool

NO_SANDBOX = SandboxStatus(False, None, "not probed in this test")
# What "sandboxed" builds with, without probing this machine.
SANDBOXED = SandboxStatus(True, "/usr/bin/bwrap", "taken as working in this test")


def names(config: ToolsConfig) -> list[str]:
    return [tool.name for tool in build_toolset(config, sandbox=SANDBOXED)]


def test_default_toolset_has_no_bash() -> None:
    assert [t.name for t in build_toolset()] == [
        "read", "write", "edit", "ls", "find", "grep", "web_fetch"
    ]  # fmt: skip


def test_bash_only_when_enabled_and_fewer_tools_on_request() -> None:
    assert "bash" in names(ToolsConfig(bash_enabled=True))
    assert names(ToolsConfig(enabled=["read", "ls"])) == ["read", "ls"]
    assert names(ToolsConfig(enabled=[], bash_enabled=True)) == ["bash"]
    with pytest.raises(ValidationError):
        ToolsConfig.model_validate({"enabled": ["read", "rm_rf"]})


def test_configuration_reaches_the_tools() -> None:
    config = ToolsConfig(
        bash_enabled=True,
        bash=BashConfig(default_timeout_s=30, max_timeout_s=90, sandbox="off"),
        web_fetch=WebFetchConfig(allow_hosts=["wiki.internal:8080"], max_redirects=2),
    )
    tools = {tool.name: tool for tool in build_toolset(config)}
    bash = tools["bash"]
    assert isinstance(bash, BashTool)
    assert (bash.default_timeout_s, bash.max_timeout_s, bash.mode) == (30, 90, "unsandboxed")
    assert "turned off in configuration" in bash.spec().description
    fetch = tools["web_fetch"]
    assert isinstance(fetch, WebFetchTool)
    assert fetch.policy.allows("wiki.internal", 8080) and not fetch.policy.allows(
        "wiki.internal", 80
    )
    assert fetch.max_redirects == 2


def test_bash_limits_and_grep_deadline_come_from_configuration() -> None:
    config = ToolsConfig.model_validate(
        {
            "bash_enabled": True,
            "bash": {"sandbox": "off", "limits": {"max_processes": 64}},
            "grep_python_timeout_s": 5,
        }
    )
    tools = {tool.name: tool for tool in build_toolset(config)}
    bash = tools["bash"]
    assert isinstance(bash, BashTool) and bash.limits.max_processes == 64
    grep = tools["grep"]
    assert isinstance(grep, GrepTool) and grep.python_timeout_s == 5
    with pytest.raises(ValidationError):
        ToolsConfig.model_validate({"grep_python_timeout_s": 0})


def test_every_tool_describes_itself_for_the_model() -> None:
    for tool in build_toolset(ToolsConfig(bash_enabled=True), sandbox=SANDBOXED):
        spec = tool.spec()
        assert len(spec.description) > 80, tool.name
        assert spec.input_schema["type"] == "object" and spec.input_schema["properties"]
        assert tool.label and tool.name.isidentifier()
