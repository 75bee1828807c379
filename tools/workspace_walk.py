"""Walking a workspace tree by directory descriptors, for find and grep.

Owns: `walk_tree` (iterative, bounded in depth, never following a symlink, skipping `.git`),
its entries and counts (`WalkEntry`, `WalkStats`, `MAX_WALK_DEPTH`) and `open_entry`, which
opens a regular file met on the way. The walk starts from a descriptor `tools.workspace` gave
(`open_dir`), so everything it reaches is inside by construction.

Must not: import anything of ours outside `core` and `tools.workspace_paths`.
"""

from __future__ import annotations

import os
import resource
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from tools.workspace_paths import DIR_FLAGS, FILE_FLAGS


def _walk_depth() -> int:
    """Directories below the top of a find/grep walk. A walk holds one descriptor per level,
    so the depth is also a share of the open-file limit (many walks may run at once)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(32, min(256, soft // 16))


MAX_WALK_DEPTH = _walk_depth()


SKIPPED_DIRS = frozenset({".git"})


@dataclass(slots=True)
class WalkEntry:
    """One entry of a walk: `rel` is relative to the top of the walk; `dir_fd` is its
    directory's descriptor, valid only until the walk moves on."""

    rel: str
    name: str
    is_dir: bool
    dir_fd: int


@dataclass(slots=True)
class WalkStats:
    too_deep: int = 0  # directories not entered because of MAX_WALK_DEPTH


def walk_tree(
    top_fd: int,
    *,
    include_dirs: bool = False,
    max_depth: int = MAX_WALK_DEPTH,
    stats: WalkStats | None = None,
) -> Iterator[WalkEntry]:
    """Every entry under the directory `top_fd` in path order (names sorted per directory,
    depth first), without following symlinks, without entering `.git`, and without recursion:
    an explicit stack of directory descriptors, at most `max_depth` deep. Symlinks and special
    files are not yielded."""
    stack: list[tuple[int, str, Iterator[tuple[str, bool]]]] = []
    try:
        first = os.dup(top_fd)
        stack.append((first, "", iter(_listing(first))))
        while stack:
            fd, prefix, entries = stack[-1]
            item = next(entries, None)
            if item is None:
                os.close(fd)
                stack.pop()
                continue
            name, is_dir = item
            rel = prefix + name
            if not is_dir:
                yield WalkEntry(rel, name, False, fd)
                continue
            if name in SKIPPED_DIRS:
                continue
            if include_dirs:
                yield WalkEntry(rel, name, True, fd)
            if len(stack) >= max_depth:
                if stats is not None:
                    stats.too_deep += 1
                continue
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link: not ours to follow
            stack.append((child, rel + "/", iter(_listing(child))))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _listing(fd: int) -> list[tuple[str, bool]]:
    """(name, is_dir) of the regular files and directories in `fd`, sorted by name."""
    found: list[tuple[str, bool]] = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                try:
                    if entry.is_symlink():
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        found.append((entry.name, True))
                    elif entry.is_file(follow_symlinks=False):
                        found.append((entry.name, False))
                except OSError:
                    continue
    except OSError:
        return []
    found.sort()
    return found


def open_entry(entry: WalkEntry) -> int | None:
    """A read descriptor of a regular file met in a walk, or None if it changed meanwhile."""
    try:
        fd = os.open(entry.name, FILE_FLAGS, dir_fd=entry.dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        return None
    return fd
