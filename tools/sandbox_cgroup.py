"""A pids cgroup per bash command, where the host lets us make one (usually: the bot runs as
root, or has a delegated cgroup).

Owns: `CommandCgroup` and `pids_cgroup_parent` (where per-command cgroups go, probed once).

Why: the kernel never applies RLIMIT_NPROC to root's processes, and a user namespace does not
change that (the command still belongs to host root), so a root bot needs a cgroup to bound a
fork bomb. The cgroup also lists every process the command started, wherever it moved
(`setsid`, double forks), so killing it leaves nothing behind even without a PID namespace.

Rules:
- One directory per command, `teammate-bash-<bot pid>-<n>`, under the bot's own cgroup of the
  pids hierarchy (cgroup v1 `pids` or v2 with `pids` delegated). Directories left by a bot that
  died are removed at the next probe; a live bot's are never touched.
- The command joins it before it starts (`wrap`: a `sh` that writes its own pid, then execs),
  so there is no window in which a child escapes the count.
- All of it is blocking file-system work on cgroupfs: call it from a worker thread.

Must not: import anything of ours.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PREFIX = "teammate-bash-"
_counter = itertools.count(1)
_JOIN = 'echo $$ > "$0" || exit 126; exec "$@"'
_KILL_ROUNDS = 200
_REMOVE_TRIES = 100


class CommandCgroup:
    """The pids cgroup of one command: join, limit, whether the limit was hit, kill, remove."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, max_processes: int) -> CommandCgroup | None:
        path = parent / f"{PREFIX}{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except OSError:
            return None
        group = cls(path)
        try:
            (path / "pids.max").write_text(str(max_processes))
        except OSError:
            group.remove()
            return None
        return group

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv`, started inside this cgroup."""
        return ["/bin/sh", "-c", _JOIN, str(self.path / "cgroup.procs"), *argv]

    def limit_reached(self) -> bool:
        """Whether a fork was refused because the command had `max_processes` already."""
        try:
            events = (self.path / "pids.events").read_text()
        except OSError:
            return False
        for line in events.splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value) > 0
        return False

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split() if pid.isdigit()]

    def kill_all(self) -> None:
        """SIGKILL everything in the cgroup until it is empty (cgroup.kill where the kernel
        has it; else rounds of kill, since a process may fork while the round runs)."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        for _ in range(_KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Remove the directory; killed processes leave the cgroup a moment after SIGKILL."""
        for _ in range(_REMOVE_TRIES):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


@functools.lru_cache(maxsize=1)
def pids_cgroup_parent() -> Path | None:
    """Where per-command pids cgroups can be made here, or None (probed once)."""
    for candidate in _candidates():
        if _usable(candidate):
            _remove_stale(candidate)
            return candidate
    return None


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" for cgroup v2."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _candidates() -> Iterator[Path]:
    own = _own_cgroups()
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in mounts:
        fields, _, rest = line.partition(" - ")
        parts, tail = fields.split(), rest.split()
        if len(parts) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, options = parts[3], parts[4], tail[0], tail[2].split(",")
        if fstype == "cgroup" and "pids" in options:
            mine = own.get("pids")
        elif fstype == "cgroup2":
            mine = own.get("")
        else:
            continue
        if mine is None or not (mine == root or mine.startswith(root.rstrip("/") + "/")):
            continue
        relative = mine[len(root.rstrip("/")) :].lstrip("/")
        yield Path(mount_point) / relative


def _usable(parent: Path) -> bool:
    if not os.access(parent, os.W_OK):
        return False
    group = CommandCgroup.create(parent, 4)
    if group is None:
        return False
    try:
        # A real join: cgroup v2 also wants write access where the move starts.
        done = subprocess.run(group.wrap(["true"]), capture_output=True, timeout=15, check=False)
        return done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        group.kill_all()
        group.remove()


def _remove_stale(parent: Path) -> None:
    """Remove the (empty) cgroups of bots that are no longer running."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            owner = entry.name.removeprefix(PREFIX).split("-")[0]
            if not entry.name.startswith(PREFIX) or not owner.isdigit():
                continue
            if not Path(f"/proc/{owner}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()
