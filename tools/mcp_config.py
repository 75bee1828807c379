"""Configuration of MCP tool servers: `[mcp]` and `[mcp.servers.NAME]` in teammate.toml.

Owns: `McpServerConfig` (a stdio `command` or a streamable-HTTP `url`, the environment and
headers it gets, which of its tools are allowed, its timeouts), `McpSettings`, and turning the
names of environment variables into the values a server gets (`resolve_env`,
`resolve_headers`), so no credential is ever written in the file.

`env` and `headers` map what the server sees to the NAME of one of our environment variables:
`env = { GITHUB_TOKEN = "TEAMMATE_GITHUB_TOKEN" }` gives the server `GITHUB_TOKEN` with the
value of our `TEAMMATE_GITHUB_TOKEN`. A missing variable is an error naming the variable, never
its value.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

# A server's name becomes the prefix of its tools' names, which the model sees.
SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$"
_ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"

# Timeouts are bounded below the loop's own per-tool deadline (core.tools, 120 s), so an MCP
# call always ends with this module's message rather than the loop's.
MAX_CALL_TIMEOUT_S = 110.0


class McpConfigError(Exception):
    """A server cannot be started as configured (a missing variable, a bad command)."""


class McpServerConfig(BaseModel):
    """One MCP server: `command` (stdio) or `url` (streamable HTTP), not both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = None
    # What the server process sees -> the name of our environment variable holding the value.
    env: dict[str, str] = Field(default_factory=dict)
    # HTTP header -> the name of our environment variable holding its whole value.
    headers: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    # Only these tools (by the server's own names); empty: every tool the server lists.
    allow_tools: list[str] = Field(default_factory=list)
    deny_tools: list[str] = Field(default_factory=list)
    call_timeout_s: float = Field(default=60.0, gt=0, le=MAX_CALL_TIMEOUT_S)
    start_timeout_s: float = Field(default=30.0, gt=0, le=MAX_CALL_TIMEOUT_S)
    # legacy: the initialize handshake every server speaks; auto: probe for the 2026 protocol.
    protocol: Literal["legacy", "auto"] = "legacy"

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command = [...] (stdio) or url = '...' (HTTP)")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("url must be an http:// or https:// URL")
            if parts.username or parts.password:
                raise ValueError("url must not hold credentials: use headers naming variables")
        if self.command is not None and not self.command[0]:
            raise ValueError("command must start with the program to run")
        if self.headers and self.url is None:
            raise ValueError("headers are for url servers")
        for key, variable in self.env.items():
            _check(_ENV_NAME_PATTERN, key, "env key")
            _check(_ENV_NAME_PATTERN, variable, f"env.{key} (the name of a variable)")
        for key, variable in self.headers.items():
            _check(_HEADER_NAME_PATTERN, key, "header name")
            _check(_ENV_NAME_PATTERN, variable, f"headers.{key} (the name of a variable)")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def fingerprint(self) -> str:
        """Identifies what is started (not the secrets): a cached tool list is only trusted
        for the same command or URL."""
        shape = {"command": self.command, "url": self.url, "protocol": self.protocol}
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]

    def allows(self, tool_name: str) -> bool:
        if tool_name in self.deny_tools:
            return False
        return not self.allow_tools or tool_name in self.allow_tools


def _check(pattern: str, value: str, what: str) -> None:
    if not re.fullmatch(pattern, value):
        # The value is not echoed: someone may have pasted a credential where a name goes.
        raise ValueError(f"{what} must be a name like MY_VARIABLE (letters, digits, _)")


class McpSettings(BaseModel):
    """`[mcp]`: the servers, and how long a run waits for a tool list never seen before."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # A server whose tools were never listed (no cached list) delays a run's start by at most
    # this long; once listed, its tools come from the cache and no run waits for it.
    first_list_wait_s: float = Field(default=5.0, ge=0, le=60.0)

    @model_validator(mode="after")
    def _names(self) -> McpSettings:
        for name in self.servers:
            _check_server_name(name)
        return self

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values the named variables hold, for redaction in logs and errors."""
        environ = os.environ if environ is None else environ
        found: list[str] = []
        for server in self.servers.values():
            for variable in [*server.env.values(), *server.headers.values()]:
                value = environ.get(variable, "")
                if len(value) >= 4:  # redacting "1" everywhere would garble every log line
                    found.append(value)
        return found


def _check_server_name(name: str) -> None:
    if not re.fullmatch(SERVER_NAME_PATTERN, name):
        raise ValueError(
            f"server name {name[:40]!r}: letters, digits, _ and - (at most 24, starting with "
            "a letter or digit)"
        )


def resolve_env(config: McpServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a stdio server gets on top of the SDK's safe defaults (PATH, HOME…)."""
    return {key: _lookup(environ, variable, f"env.{key}") for key, variable in config.env.items()}


def resolve_headers(config: McpServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    return {
        key: _lookup(environ, variable, f"headers.{key}")
        for key, variable in config.headers.items()
    }


def _lookup(environ: Mapping[str, str], variable: str, what: str) -> str:
    value = environ.get(variable)
    if value is None:
        raise McpConfigError(f"the environment variable {variable} (for {what}) is not set")
    return value
