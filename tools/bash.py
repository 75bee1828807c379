"""The bash tool: run a shell command in the workspace, bounded in time, output and reach.

Owns: `BashTool`: the command's argv (sandboxed or not), its environment, its supervision and
how its outcome is worded. Killing a command's whole process tree and per-command containment
are tools.bash_process; its output (tail shown, whole saved) is tools.bash_output. The sandbox
itself (its command line, `SandboxLimits`, `SandboxStatus`, `probe_sandbox`) is tools.sandbox;
per-command pids cgroups are tools.sandbox_cgroup. Both are re-exported here for the toolset.

Rules:
- Off unless configuration enables it (tools.toolset decides).
- The command runs as `bash -c` in the workspace, in its own session and process group, with a
  scrubbed environment (the bot's secrets are never inherited) and `SandboxLimits`' rlimits.
- When it ends, times out or is cancelled, everything it started is killed: the process group,
  every descendant found in /proc (SIGTERM, a short grace, then SIGKILL), and everything in
  its pids cgroup (where the host gives us one), which also holds what left the tree with
  `setsid`. Sandboxed, the PID namespace does the same; unsandboxed, the command gets its own
  PID namespace where `unshare` can make one. Where neither a cgroup nor a PID namespace is
  available, the tool's description says plainly that such processes may survive.
- Sandboxed (bubblewrap usable): an unprivileged user with no capabilities; the workspace is
  the only writable place that persists; system directories are read-only; /tmp and /dev/shm
  are small fresh tmpfs; no network; own PID namespace. Whether bwrap works is checked once.
- Output streams through `on_update` (throttled); the model sees the tail (2000 lines or
  50 KB); when cut, the full output is saved under `.teammate/bash-output/` in the workspace.
- Exit code other than 0, a timeout or a stop: `ToolError` with the output and the reason; a
  command that hit the process limit says so.

Must not: import anything of ours outside `core` and `tools.sandbox*`, `tools.bash_*`,
`tools.workspace`, `tools.truncation`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.models.base import ToolSpec
from core.tools import AgentTool, ToolContext, ToolError, ToolResult, tool_input_schema
from tools.bash_output import MAX_SAVED_BYTES, CommandOutput
from tools.bash_process import (
    KILL_GRACE_S,
    ExitWatch,
    command_cgroup,
    kill_tree,
    probe_containment,
    wait_exit,
)
from tools.sandbox import (
    SandboxLimits,
    SandboxStatus,
    bwrap_command,
    limited_shell,
    probe_pid_namespace,
    probe_sandbox,
    seccomp_fd,
)
from tools.sandbox_cgroup import CommandCgroup
from tools.truncation import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    format_size,
)
from tools.workspace import workspace_root, write_file_in_workspace

SandboxMode = Literal["auto", "required", "off"]

__all__ = [
    "HARD_MAX_TIMEOUT_S",
    "BashParams",
    "BashTool",
    "SandboxLimits",
    "SandboxMode",
    "SandboxStatus",
    "bwrap_command",
    "probe_containment",
    "probe_sandbox",
]

HARD_MAX_TIMEOUT_S = 3600.0
UPDATE_INTERVAL_S = 0.25
OUTPUT_DIR = ".teammate/bash-output"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_Output = CommandOutput  # its name from before tools.bash_output, which tests import

# -- the tool ------------------------------------------------------------------------------


class BashParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The bash command to run (run with `bash -c`).")
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=HARD_MAX_TIMEOUT_S,
        description="Seconds before the command is stopped (default and maximum in the tool "
        "description).",
    )


class BashTool(AgentTool[BashParams]):
    name: ClassVar[str] = "bash"
    label: ClassVar[str] = "Bash"
    description: ClassVar[str] = (
        "Run a bash command in the workspace directory (the current directory; the workspace is "
        "also $HOME). Returns the combined stdout and stderr; only the last "
        f"{DEFAULT_MAX_LINES} lines or {DEFAULT_MAX_BYTES // 1024} KB are shown, and when more "
        f"was printed the full output is saved under {OUTPUT_DIR}/ (the notice gives the file; "
        "use read with offset or grep on it). A non-zero exit status is reported as an error "
        "with the output. No input can be given (stdin is empty), so avoid interactive commands. "
        "Background processes are stopped when the command ends."
    )
    parameters: ClassVar[type[BaseModel]] = BashParams
    # The loop's own limit; the command's timeout (at most HARD_MAX_TIMEOUT_S) acts first.
    timeout_s: ClassVar[float] = HARD_MAX_TIMEOUT_S + 60

    def __init__(
        self,
        *,
        sandbox: SandboxStatus,
        require_sandbox: bool = False,
        default_timeout_s: float = 120.0,
        max_timeout_s: float = 600.0,
        extra_ro_paths: Sequence[str] = (),
        hidden_paths: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        update_interval_s: float = UPDATE_INTERVAL_S,
        limits: SandboxLimits | None = None,
        process_cgroup: bool = True,
        pid_namespace: bool = True,
    ) -> None:
        self.sandbox = sandbox
        self.limits = limits or SandboxLimits()
        # Ways of keeping track of everything a command starts, used where the host allows:
        # a pids cgroup (also the only process limit for a root bot), and outside the sandbox
        # a PID namespace (the sandbox has its own).
        self.process_cgroup = process_cgroup
        self.pid_namespace = pid_namespace
        self.require_sandbox = require_sandbox
        self.max_timeout_s = min(max_timeout_s, HARD_MAX_TIMEOUT_S)
        self.default_timeout_s = min(default_timeout_s, self.max_timeout_s)
        self.extra_ro_paths = tuple(extra_ro_paths)
        self.hidden_paths = tuple(hidden_paths)  # Teammate's own files: empty in the sandbox
        self.extra_env = dict(env or {})
        self.update_interval_s = update_interval_s

    @property
    def mode(self) -> Literal["sandboxed", "unsandboxed"]:
        return self.sandbox.mode

    def model_description(self) -> str:
        limits = (
            f" Default timeout {self.default_timeout_s:g} s, at most {self.max_timeout_s:g} s "
            "(set `timeout`). Each process may use "
            f"{_round_size(self.limits.memory_bytes)} of memory and write files up to "
            f"{_round_size(self.limits.file_size_bytes)}."
        )
        if self.sandbox.available:
            where = (
                " Mode: sandboxed. Only the workspace is writable (and /tmp, "
                f"{_round_size(self.limits.tmp_size_bytes)} at most, emptied after each "
                "command); system directories are read-only; files outside the workspace are "
                "not visible; there is no network access; at most "
                f"{self.limits.max_processes} processes."
            )
        elif self.require_sandbox:
            where = f" Mode: unavailable ({self.sandbox.reason}); commands will be refused."
        else:
            where = (
                " Mode: unsandboxed (the sandbox is unavailable: "
                f"{self.sandbox.reason}). Stay inside the workspace."
            )
            if not self.contained():
                where += (
                    " Processes that start their own session (setsid, daemons) may keep "
                    "running after the command ends; do not start any."
                )
        return self.description + limits + where

    def contained(self) -> bool:
        """Whether everything a command starts is sure to end with it: always in the sandbox
        (its PID namespace), else with a pids cgroup or a PID namespace. Blocking the first
        time (cached probes); `probe_containment` warms it."""
        if self.sandbox.available:
            return True
        return probe_containment(cgroup=self.process_cgroup, pid_namespace=self.pid_namespace)

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.model_description(),
            input_schema=tool_input_schema(self.parameters),
        )

    def summarize(self, params: BashParams) -> str:
        line = params.command.strip().splitlines()[0] if params.command.strip() else ""
        if len(line) > 80 or "\n" in params.command.strip():
            line = line[:77] + "…"
        return f"Run `{line}`"

    def _env(self, root: Path) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            "HOME": str(root),
            "PWD": str(root),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }
        env.update(self.extra_env)
        return env

    def _argv(
        self, root: Path, command: str, seccomp: int | None, prefix: tuple[str, ...] | None
    ) -> list[str]:
        sandboxed = self.sandbox.available and self.sandbox.bwrap is not None
        shell = limited_shell(command, self.limits, count_processes=sandboxed)
        if self.sandbox.available and self.sandbox.bwrap:
            return bwrap_command(
                self.sandbox.bwrap,
                root,
                shell,
                extra_ro=self.extra_ro_paths,
                limits=self.limits,
                seccomp_fd=seccomp,
                disable_userns=self.sandbox.disable_userns,
                tmpfs_size=self.sandbox.tmpfs_size,
                hidden=self.hidden_paths,
            )
        return [*prefix, *shell] if prefix else shell

    async def execute(self, call_id: str, params: BashParams, ctx: ToolContext) -> ToolResult:
        if self.require_sandbox and not self.sandbox.available:
            raise ToolError(
                "bash is configured to run only in a sandbox, and the sandbox cannot run here "
                f"({self.sandbox.reason})."
            )
        if not params.command.strip():
            raise ToolError("The command is empty.")
        root = workspace_root(ctx.workspace)
        timeout = min(params.timeout or self.default_timeout_s, self.max_timeout_s)
        group = (
            await asyncio.to_thread(command_cgroup, self.limits.max_processes)
            if self.process_cgroup
            else None
        )
        try:
            return await self._run(call_id, params, ctx, root, timeout, group)
        finally:
            if group is not None:
                await asyncio.to_thread(group.kill_all)
                await asyncio.to_thread(group.remove)

    async def _run(
        self,
        call_id: str,
        params: BashParams,
        ctx: ToolContext,
        root: Path,
        limit_s: float,
        group: CommandCgroup | None,
    ) -> ToolResult:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        seccomp = seccomp_fd() if self.sandbox.available else None
        prefix = None
        if self.pid_namespace and not self.sandbox.available:
            prefix = await asyncio.to_thread(probe_pid_namespace)
        argv = self._argv(root, params.command, seccomp, prefix)
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: ExitWatch(limit=2**16, loop=loop),
                *(group.wrap(argv) if group is not None else argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=root,
                env=self._env(root),
                start_new_session=True,
                pass_fds=(seccomp,) if seccomp is not None else (),
            )
        finally:
            if seccomp is not None:
                os.close(seccomp)
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        output = CommandOutput()
        try:
            outcome = await self._supervise(proc, protocol, transport, output, ctx, limit_s, group)
            hit = group is not None and await asyncio.to_thread(group.limit_reached)
            return await self._finish(
                call_id, params, root, output, proc, outcome, limit_s, started, process_limit=hit
            )
        finally:
            output.close()

    async def _supervise(
        self,
        proc: asyncio.subprocess.Process,
        protocol: ExitWatch,
        transport: asyncio.SubprocessTransport,
        output: CommandOutput,
        ctx: ToolContext,
        limit_s: float,
        group: CommandCgroup | None,
    ) -> Literal["exited", "timeout", "stopped"]:
        """Wait for the command to exit, time out or be stopped; then kill what is left."""
        assert proc.stdout is not None
        reader = asyncio.create_task(self._pump(proc.stdout, output, ctx))
        outcome: Literal["exited", "timeout", "stopped"] = "stopped"
        try:
            try:
                async with asyncio.timeout(limit_s):
                    outcome = await wait_exit(protocol.exited, ctx)
            except TimeoutError:
                outcome = "timeout"
        finally:
            # Whatever happened (exit, timeout, cancel), nothing the command started survives.
            grace = 0.0 if outcome == "exited" else KILL_GRACE_S
            try:
                await kill_tree(proc.pid, protocol.exited, grace=grace)
                if group is not None:  # what left the tree (setsid, double fork) is still here
                    await asyncio.to_thread(group.kill_all)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), 2.0)
            finally:
                reader.cancel()
                transport.close()
        return outcome

    async def _pump(
        self, stream: asyncio.StreamReader, output: CommandOutput, ctx: ToolContext
    ) -> None:
        last = 0.0
        while chunk := await stream.read(65536):
            await output.add(chunk)
            now = time.monotonic()
            if now - last >= self.update_interval_s:
                last = now
                text, _ = output.tail_text()
                ctx.on_update(ToolResult.text(text, {"partial": True, "mode": self.mode}))

    async def _finish(
        self,
        call_id: str,
        params: BashParams,
        root: Path,
        output: CommandOutput,
        proc: asyncio.subprocess.Process,
        outcome: Literal["exited", "timeout", "stopped"],
        limit_s: float,
        started: float,
        *,
        process_limit: bool,
    ) -> ToolResult:
        text, cut = output.tail_text()
        code = proc.returncode
        details: dict[str, Any] = {
            "command": params.command,
            "exit_code": code if outcome == "exited" else None,
            "mode": self.mode,
            "timed_out": outcome == "timeout",
            "duration_s": round(time.monotonic() - started, 3),
            "output_bytes": output.total_bytes,
            "truncated": cut,
            "process_limit_reached": process_limit,
        }
        body = text if text.strip() else "(no output)"
        if process_limit:
            body += (
                f"\n\n[The command reached its limit of {self.limits.max_processes} processes: "
                "starting more failed.]"
            )
        if cut:
            saved = await self._save_full(call_id, root, output)
            details["full_output_path"] = saved
            shown_lines = len(text.split("\n")) if text else 0
            notice = (
                f"[Output cut: showing the last {shown_lines} lines of {output.total_lines} "
                f"({format_size(output.total_bytes)} in all)."
            )
            if saved:
                partial = " (first 50 MB)" if output.total_bytes > MAX_SAVED_BYTES else ""
                notice += f" Full output{partial} saved to {saved}; read or grep it for more."
            body += "\n\n" + notice + "]"
        if outcome == "timeout":
            raise ToolError(
                f"{body}\n\nCommand timed out after {limit_s:g} s and was stopped.", details=details
            )
        if outcome == "stopped":
            raise ToolError(f"{body}\n\nCommand was stopped.", details=details)
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            raise ToolError(f"{body}\n\nCommand was killed by signal {name}.", details=details)
        if code != 0:
            raise ToolError(f"{body}\n\nCommand exited with code {code}.", details=details)
        return ToolResult.text(body, details)

    async def _save_full(self, call_id: str, root: Path, output: CommandOutput) -> str | None:
        """Save the whole output in the workspace through the confined writer, which follows
        no symlink on the way (the command, or another thread of the channel, may have put
        one there). None when it could not be saved."""
        safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id)[:100] or "output"
        relative = f"{OUTPUT_DIR}/{safe_id}.log"
        try:
            data = await asyncio.to_thread(output.full)
            return await asyncio.to_thread(
                write_file_in_workspace, root, relative, data, max_bytes=MAX_SAVED_BYTES
            )
        except (ToolError, OSError):
            return None  # e.g. .teammate was replaced by a link


def _round_size(size: int) -> str:
    for unit, name in ((1 << 30, "GB"), (1 << 20, "MB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return format_size(size)
