"""The bash tool's bubblewrap sandbox: the command line, its limits, and whether it works here.

Owns: `SandboxStatus`, `SandboxLimits`, `bwrap_command`, `limited_shell`, `probe_sandbox`.

Rules:
- Nothing privileged survives inside: a new user namespace maps the command to an ordinary user
  (`SANDBOX_UID`), every capability is dropped, further user namespaces are refused where
  bubblewrap can, and a seccomp filter refuses ptrace and the unnamespaced kernel interfaces
  (tools.sandbox_seccomp). A root bot's command can therefore not remount, unmount, make
  devices or open raw sockets; the mounts it inherits are locked by the kernel.
- Mounts are emitted in an order where nothing hides what came before: system directories,
  /dev, /proc and the fresh /tmp first, then the extra read-only paths (which may be under
  /tmp), then the masks (which must win over everything), then the workspace.
- Every writable place is bounded: /tmp and /dev/shm are tmpfs of `tmp_size_bytes` each, the
  rest of /dev and the masked directories are read-only; per process, file size and data
  memory are capped by rlimits set inside (`limited_shell`); the number of processes by
  RLIMIT_NPROC inside the user namespace and, where the host allows it, a pids cgroup
  (tools.sandbox_cgroup) since the kernel exempts root's own processes from RLIMIT_NPROC.

Must not: import anything of ours outside `tools.sandbox_*`.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.sandbox_seccomp import seccomp_program

MIB = 1024 * 1024
GIB = 1024 * MIB
SANDBOX_UID = 1000
SANDBOX_GID = 1000

# Read-only in the sandbox: enough to run the usual tools, nothing of the host's homes or data.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Inside those, what commands must not read: password hashes, host keys and credentials. Files
# are replaced by an empty one, directories by an empty read-only tmpfs.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers")
MASKED_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private", "/etc/teammate")


class SandboxLimits(BaseModel):
    """What one bash command may use. The defaults let builds and test suites run while keeping
    one command from taking the machine (and every other conversation) down with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Processes and threads the command may have at once (a fork bomb stops here).
    max_processes: int = Field(default=256, ge=4, le=100_000)
    # Data memory (heap and private writable mappings) per process, RLIMIT_DATA: unlike an
    # address-space cap it does not break runtimes that reserve large virtual ranges (V8, Go).
    memory_bytes: int = Field(default=2 * GIB, ge=16 * MIB)
    # The largest file a process may write, RLIMIT_FSIZE (in the workspace too).
    file_size_bytes: int = Field(default=1 * GIB, ge=1 * MIB)
    # Size of each of the sandbox's memory-backed filesystems, /tmp and /dev/shm.
    tmp_size_bytes: int = Field(default=512 * MIB, ge=1 * MIB)


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """Whether commands can run under bubblewrap here, and if not, why."""

    available: bool
    bwrap: str | None
    reason: str
    # bubblewrap before 0.8 has neither --disable-userns (the locked mounts hold without it) nor
    # --size (its tmpfs are then bounded only by the kernel's default, half the RAM).
    disable_userns: bool = True
    tmpfs_size: bool = True

    @property
    def mode(self) -> Literal["sandboxed", "unsandboxed"]:
        return "sandboxed" if self.available else "unsandboxed"


def bwrap_command(
    bwrap: str,
    workspace: Path,
    command: Sequence[str],
    *,
    extra_ro: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    seccomp_fd: int | None = None,
    disable_userns: bool = True,
    tmpfs_size: bool = True,
    hidden: Sequence[str] = (),
) -> list[str]:
    """The bwrap command line running `command` with `workspace` as the only writable place
    that persists. `seccomp_fd` must be passed on to bwrap (pass_fds). `hidden`: Teammate's
    own files (its data directory with every channel's workspace and the database, its
    configuration and env files), shown empty wherever they lie: a bound system directory
    (Teammate under /opt, say) would otherwise show them to every channel's commands."""
    limits = limits or SandboxLimits()

    def tmpfs(path: str, size: int) -> list[str]:
        return (["--size", str(size)] if tmpfs_size else []) + ["--tmpfs", path]

    args = [bwrap, "--die-with-parent", "--new-session"]
    args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    args += ["--cap-drop", "ALL"]
    if disable_userns:
        args.append("--disable-userns")
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--dev", "/dev", *tmpfs("/dev/shm", limits.tmp_size_bytes), "--remount-ro", "/dev"]
    args += ["--proc", "/proc", *tmpfs("/tmp", limits.tmp_size_bytes)]
    for path in extra_ro:
        args += ["--ro-bind-try", path, path]
    for path in MASKED_FILES:
        if os.path.isfile(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in MASKED_DIRS:
        if os.path.isdir(path):
            args += [*tmpfs(path, 4096), "--remount-ro", path]
    hidden_dirs = [path for path in hidden if os.path.isdir(path)]
    for path in hidden_dirs:  # read-only once the workspace (perhaps inside) is bound
        args += tmpfs(path, 4096)
    for path in hidden:
        if os.path.isfile(path):
            args += ["--ro-bind", "/dev/null", path]
    ws = str(workspace)
    args += ["--bind", ws, ws]
    for path in hidden_dirs:
        args += ["--remount-ro", path]
    args += ["--remount-ro", "/", "--chdir", ws, "--"]
    return args + list(command)


# Runs the command in a shell whose limits are set first; `ulimit` without -S/-H sets both, and
# nothing inside holds CAP_SYS_RESOURCE to raise them again. $1 is the command.
_LIMITED = 'ulimit -d {data} -f {fsize}{nproc} || exit 126; exec bash -c "$1"'


def limited_shell(command: str, limits: SandboxLimits, *, count_processes: bool) -> list[str]:
    """`bash -c command` under `limits`' rlimits. `count_processes` only inside the sandbox:
    outside a user namespace RLIMIT_NPROC counts every process of the bot's user."""
    data = _within_hard_limit(resource.RLIMIT_DATA, limits.memory_bytes) // 1024
    fsize = _within_hard_limit(resource.RLIMIT_FSIZE, limits.file_size_bytes) // 1024
    nproc = ""
    if count_processes:
        nproc = f" -u {_within_hard_limit(resource.RLIMIT_NPROC, limits.max_processes)}"
    script = _LIMITED.format(data=data, fsize=fsize, nproc=nproc)
    return ["bash", "-c", script, "bash", command]


def _within_hard_limit(which: int, wanted: int) -> int:
    """`wanted`, or the bot's own hard limit where that is lower (ulimit may not raise it)."""
    _, hard = resource.getrlimit(which)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def seccomp_fd() -> int | None:
    """A pipe's read end holding the seccomp filter, for `--seccomp` (None where the filter does
    not know this architecture). The caller passes it to bwrap and closes it afterwards."""
    program = seccomp_program()
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: fits the pipe buffer
    finally:
        os.close(write_end)
    return read_end


@functools.lru_cache(maxsize=8)
def probe_sandbox(bwrap: str | None = None) -> SandboxStatus:
    """Run `bwrap ... true` once (cached per bwrap path) to learn whether the sandbox works:
    bubblewrap often fails in containers that forbid namespaces. Blocking; call at start-up."""
    path = bwrap or shutil.which("bwrap")
    if path is None:
        return SandboxStatus(False, None, "bubblewrap (bwrap) is not installed")
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, path, f"bubblewrap could not run: {exc}")
    options = set(re.findall(r"--[a-z-]+", usage.stdout.decode("utf-8", "replace")))
    status = SandboxStatus(
        True,
        path,
        "bubblewrap works",
        disable_userns="--disable-userns" in options,
        tmpfs_size="--size" in options,
    )
    failure = _try_bwrap(status)
    return replace(status, available=False, reason=failure) if failure else status


def _try_bwrap(status: SandboxStatus) -> str:
    """Empty when the full sandbox command runs here, else why not."""
    fd = seccomp_fd()
    try:
        with tempfile.TemporaryDirectory(prefix="teammate-bwrap-probe-") as probe_dir:
            assert status.bwrap is not None
            argv = bwrap_command(
                status.bwrap,
                Path(probe_dir),
                ["true"],
                seccomp_fd=fd,
                disable_userns=status.disable_userns,
                tmpfs_size=status.tmpfs_size,
            )
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=15,
                check=False,
                pass_fds=(fd,) if fd is not None else (),
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    finally:
        if fd is not None:
            os.close(fd)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap fails here: {why[-1] if why else done.returncode}"
    return ""


# Where the sandbox is off or unusable, commands still get their own PID namespace when the host
# allows one, so that everything they start (even `setsid`) dies with them: when the command's
# shell (PID 1 there) ends, or `unshare` is killed, the kernel kills every process inside.
_PID_NAMESPACE_PREFIXES = (
    ("unshare", "--pid", "--fork", "--kill-child"),
    ("unshare", "--user", "--map-current-user", "--pid", "--fork", "--kill-child"),
)


@functools.lru_cache(maxsize=1)
def probe_pid_namespace() -> tuple[str, ...] | None:
    """The command prefix that runs a command in a new PID namespace here, or None. Blocking;
    cached."""
    binary = shutil.which("unshare")
    if binary is None:
        return None
    for prefix in _PID_NAMESPACE_PREFIXES:
        argv = (binary, *prefix[1:])
        try:
            done = subprocess.run([*argv, "true"], capture_output=True, timeout=15, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return argv
    return None
