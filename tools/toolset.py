"""The default toolset, built from configuration.

Owns: `ToolsConfig` (which tools a channel gets and their limits) and `build_toolset`, the one
place that turns that configuration into tool instances.

`bash` is included only when `bash_enabled` is true; everything else in `enabled` is included.
The sandbox is probed once per process (cached), so building a toolset per channel is cheap.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.tools import AnyTool
from tools.bash import (
    HARD_MAX_TIMEOUT_S,
    BashTool,
    SandboxLimits,
    SandboxMode,
    SandboxStatus,
    probe_sandbox,
)
from tools.files import EditTool, FindTool, LsTool, ReadTool, WriteTool
from tools.grep import PYTHON_TIMEOUT_S, Engine, GrepTool
from tools.web_fetch import Resolver, TransportFactory, WebFetchTool, system_resolver

log = logging.getLogger(__name__)

ToolName = Literal["read", "write", "edit", "ls", "find", "grep", "web_fetch"]
ALL_TOOLS: tuple[ToolName, ...] = ("read", "write", "edit", "ls", "find", "grep", "web_fetch")
READ_ONLY_TOOLS: tuple[ToolName, ...] = ("read", "ls", "find", "grep")


class BashConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_timeout_s: float = Field(default=120.0, gt=0, le=HARD_MAX_TIMEOUT_S)
    max_timeout_s: float = Field(default=600.0, gt=0, le=HARD_MAX_TIMEOUT_S)
    # auto: sandboxed when bubblewrap works, else no bash (one line says why: unconfined, a
    # command could read Teammate's secrets and every channel's files);
    # required: refuse to run commands without the sandbox; off: never sandbox (an explicit
    # choice that `teammate doctor` flags: commands can read what the bot can).
    sandbox: SandboxMode = "auto"
    # Extra host paths visible read-only inside the sandbox (e.g. a toolchain under /srv).
    sandbox_ro_paths: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Per-command processes, memory, file size and tmpfs size (`[tools.bash.limits]`).
    limits: SandboxLimits = Field(default_factory=SandboxLimits)


class WebFetchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Hosts that may be fetched although private or local: "host" (any port) or "host:port".
    allow_hosts: list[str] = Field(default_factory=list)
    max_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    timeout_s: float = Field(default=20.0, gt=0, le=55.0)
    max_redirects: int = Field(default=5, ge=0, le=10)


class ToolsConfig(BaseModel):
    """The tools one channel (or the whole bot) gets."""

    model_config = ConfigDict(extra="forbid")

    enabled: list[ToolName] = Field(default_factory=lambda: list(ALL_TOOLS))
    bash_enabled: bool = False
    bash: BashConfig = Field(default_factory=BashConfig)
    web_fetch: WebFetchConfig = Field(default_factory=WebFetchConfig)
    grep_engine: Engine = "auto"
    # How long grep's Python engine (lookarounds, backreferences, or no ripgrep) may run
    # before it is stopped: a catastrophic pattern is killed, not waited for.
    grep_python_timeout_s: float = Field(default=PYTHON_TIMEOUT_S, gt=0, le=HARD_MAX_TIMEOUT_S)
    # Which `[mcp.servers]` this channel gets (tools.mcp): None, every one; [] none.
    mcp_servers: list[str] | None = None


def build_toolset(
    config: ToolsConfig | None = None,
    *,
    sandbox: SandboxStatus | None = None,
    resolver: Resolver = system_resolver,
    transport_factory: TransportFactory | None = None,
    hidden_paths: Sequence[str] = (),
) -> list[AnyTool]:
    """Tool instances for `config`, in a stable order (read, write, edit, ls, find, grep,
    bash, web_fetch). `sandbox` overrides the probed bubblewrap status; `resolver` and
    `transport_factory` let tests keep web_fetch off the network. `hidden_paths`: Teammate's
    own files, shown empty to sandboxed commands (tools.sandbox)."""
    config = config or ToolsConfig()
    enabled = set(config.enabled)
    tools: list[AnyTool] = []
    if "read" in enabled:
        tools.append(ReadTool())
    if "write" in enabled:
        tools.append(WriteTool())
    if "edit" in enabled:
        tools.append(EditTool())
    if "ls" in enabled:
        tools.append(LsTool())
    if "find" in enabled:
        tools.append(FindTool())
    if "grep" in enabled:
        tools.append(
            GrepTool(engine=config.grep_engine, python_timeout_s=config.grep_python_timeout_s)
        )
    if config.bash_enabled:
        bash = _build_bash(config.bash, sandbox, hidden_paths)
        if bash is not None:
            tools.append(bash)
    if "web_fetch" in enabled:
        fetch = config.web_fetch
        tools.append(
            WebFetchTool(
                allow_hosts=fetch.allow_hosts,
                max_bytes=fetch.max_bytes,
                timeout_s=fetch.timeout_s,
                max_redirects=fetch.max_redirects,
                resolver=resolver,
                transport_factory=transport_factory,
            )
        )
    return tools


def bash_off_reason(status: SandboxStatus) -> str:
    """The one line said when `auto` finds no sandbox: bash is then off, not unconfined."""
    return (
        f"bash is off: the sandbox cannot run here ({status.reason}), and without it a "
        "command could read Teammate's tokens and every channel's files. Install bubblewrap "
        "and allow unprivileged user namespaces (in a container: run it with a seccomp and "
        'AppArmor profile that permit them), or set [tools.bash] sandbox = "off" to run '
        "commands unconfined on purpose."
    )


_warned_off: set[str] = set()


def _build_bash(
    config: BashConfig, sandbox: SandboxStatus | None, hidden_paths: Sequence[str]
) -> BashTool | None:
    if config.sandbox == "off":
        status = SandboxStatus(False, None, "the sandbox is turned off in configuration")
    else:
        status = sandbox if sandbox is not None else probe_sandbox()
        if config.sandbox == "auto" and not status.available:
            line = bash_off_reason(status)
            if line not in _warned_off:  # once per process, not once per channel and run
                _warned_off.add(line)
                log.warning(line)
            return None
    return BashTool(
        sandbox=status,
        require_sandbox=config.sandbox == "required",
        default_timeout_s=min(config.default_timeout_s, config.max_timeout_s),
        max_timeout_s=config.max_timeout_s,
        extra_ro_paths=config.sandbox_ro_paths,
        hidden_paths=hidden_paths,
        env=config.env,
        limits=config.limits,
    )
