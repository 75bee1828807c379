"""The bash tool: run a shell command in the workspace, bounded in time, output and reach.

Owns: `BashTool` and killing a command's whole process tree. The sandbox itself (its command
line, `SandboxLimits`, `SandboxStatus`, `probe_sandbox`) is tools.sandbox; per-command pids
cgroups are tools.sandbox_cgroup. Both are re-exported here for the toolset.

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

Must not: import anything of ours outside `core` and `tools.sandbox*`, `tools.workspace`,
`tools.truncation`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.models.base import ToolSpec
from core.tools import AgentTool, ToolContext, ToolError, ToolResult, tool_input_schema
from tools.sandbox import (
    SandboxLimits,
    SandboxStatus,
    bwrap_command,
    limited_shell,
    probe_pid_namespace,
    probe_sandbox,
    seccomp_fd,
)
from tools.sandbox_cgroup import CommandCgroup, pids_cgroup_parent
from tools.truncation import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    format_size,
    truncate_tail,
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
KILL_GRACE_S = 2.0
UPDATE_INTERVAL_S = 0.25
OUTPUT_DIR = ".teammate/bash-output"
MAX_SAVED_BYTES = 50 * 1024 * 1024
_MEMORY_BYTES = 1024 * 1024
_TAIL_KEEP = 2 * DEFAULT_MAX_BYTES
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# -- process trees -------------------------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc (empty where /proc is missing)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain anything; fields follow the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal_tree(pgid: int, pids: set[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def _kill_tree(pid: int, exited: asyncio.Event, *, grace: float) -> None:
    """SIGTERM the command's group and descendants, wait up to `grace`, then SIGKILL them all.
    The SIGKILL is sent even if this is cancelled while waiting."""
    pids = _descendants(pid)
    try:
        if grace > 0:
            _signal_tree(pid, pids, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(exited.wait(), grace)
    finally:
        _signal_tree(pid, pids | _descendants(pid), signal.SIGKILL)


class _ExitWatch(asyncio.subprocess.SubprocessStreamProtocol):
    """Knows when the process exits, even while something it started still holds the pipe
    (`Process.wait` on Python 3.11 waits for the pipe too)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


# -- output --------------------------------------------------------------------------------


def _new_spill_file() -> IO[bytes]:
    return tempfile.TemporaryFile(prefix="teammate-bash-")


class _Output:
    """A command's output: counted, its tail kept in memory, the whole kept for saving (in
    memory while small, then in a temporary file outside the workspace, up to a cap)."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.newlines = 0
        self.last_byte = b""
        self.tail = bytearray()
        self.memory = bytearray()
        self.spill: IO[bytes] | None = None
        self.saved = 0

    async def add(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        self.newlines += chunk.count(b"\n")
        self.last_byte = chunk[-1:]
        self.tail += chunk
        if len(self.tail) > _TAIL_KEEP:
            del self.tail[: len(self.tail) - _TAIL_KEEP]
        room = MAX_SAVED_BYTES - self.saved
        part = chunk[:room]
        if not part:
            return
        self.saved += len(part)
        if self.spill is None and len(self.memory) + len(part) <= _MEMORY_BYTES:
            self.memory += part
            return
        spill = self.spill
        if spill is None:
            spill = await asyncio.to_thread(_new_spill_file)
            self.spill = spill
            await asyncio.to_thread(spill.write, bytes(self.memory))
            self.memory.clear()
        await asyncio.to_thread(spill.write, part)

    @property
    def total_lines(self) -> int:
        return self.newlines + (1 if self.last_byte not in (b"", b"\n") else 0)

    def tail_text(self) -> tuple[str, bool]:
        """The kept tail as text (starting at a line boundary) and whether it is cut."""
        data = bytes(self.tail)
        if self.total_bytes > len(data):
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut != -1 else data
        text = data.decode("utf-8", "replace")
        result = truncate_tail(text)
        cut_off = result.truncated or self.total_bytes > len(self.tail)
        return result.content, cut_off

    def full(self) -> bytes:
        if self.spill is None:
            return bytes(self.memory)
        self.spill.seek(0)
        return self.spill.read()

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


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
            await asyncio.to_thread(_command_cgroup, self.limits.max_processes)
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
                lambda: _ExitWatch(limit=2**16, loop=loop),
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
        output = _Output()
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
        protocol: _ExitWatch,
        transport: asyncio.SubprocessTransport,
        output: _Output,
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
                    outcome = await _wait_exit(protocol.exited, ctx)
            except TimeoutError:
                outcome = "timeout"
        finally:
            # Whatever happened (exit, timeout, cancel), nothing the command started survives.
            grace = 0.0 if outcome == "exited" else KILL_GRACE_S
            try:
                await _kill_tree(proc.pid, protocol.exited, grace=grace)
                if group is not None:  # what left the tree (setsid, double fork) is still here
                    await asyncio.to_thread(group.kill_all)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), 2.0)
            finally:
                reader.cancel()
                transport.close()
        return outcome

    async def _pump(self, stream: asyncio.StreamReader, output: _Output, ctx: ToolContext) -> None:
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
        output: _Output,
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

    async def _save_full(self, call_id: str, root: Path, output: _Output) -> str | None:
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


def probe_containment(*, cgroup: bool = True, pid_namespace: bool = True) -> bool:
    """Whether commands outside the sandbox can be kept from outliving themselves here (a pids
    cgroup or a PID namespace). Blocking the first time, then cached: call it in a thread at
    start-up so that building the tool's description later does not wait."""
    return (cgroup and pids_cgroup_parent() is not None) or (
        pid_namespace and probe_pid_namespace() is not None
    )


def _command_cgroup(max_processes: int) -> CommandCgroup | None:
    """A fresh pids cgroup for one command, or None where this host gives us none. Blocking."""
    parent = pids_cgroup_parent()
    return CommandCgroup.create(parent, max_processes) if parent is not None else None


async def _wait_exit(exited: asyncio.Event, ctx: ToolContext) -> Literal["exited", "stopped"]:
    done_exit = asyncio.ensure_future(exited.wait())
    done_stop = asyncio.ensure_future(ctx.signal.wait())
    try:
        await asyncio.wait({done_exit, done_stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        done_exit.cancel()
        done_stop.cancel()
    return "exited" if exited.is_set() else "stopped"
