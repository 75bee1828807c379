"""Glob patterns as `find` and `grep` understand them, and the workspace walk they share.

Owns: `compile_glob` (a glob → a matcher on workspace-relative paths) and `walk_files` (a
deterministic, symlink-free walk of a directory tree).

Glob rules (the same as ripgrep's `--glob`): a pattern without '/' matches a name at any depth
(`*.py`); a pattern with '/' matches the whole path relative to the search directory
(`src/**/test_*.py`). `*` and `?` never cross '/', `**` crosses any number of directories,
`[abc]` is a character class and `{a,b}` an alternation.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

SKIPPED_DIRS = frozenset({".git"})


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif ch == "{":
            depth += 1
            out.append("(?:")
        elif ch == "}" and depth:
            depth -= 1
            out.append(")")
        elif ch == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(ch))
        i += 1
    out.extend(")" * depth)
    return "".join(out)


def compile_glob(pattern: str) -> Callable[[str], bool]:
    """A matcher for '/'-separated paths relative to the search directory."""
    pattern = pattern.removeprefix("./")
    anchored = "/" in pattern.rstrip("/")
    regex = re.compile(_translate(pattern.rstrip("/")) + r"\Z", re.DOTALL)

    def matches(relative: str) -> bool:
        target = relative if anchored else relative.rsplit("/", 1)[-1]
        return regex.match(target) is not None

    return matches


def walk_files(top: Path, *, include_dirs: bool = False) -> Iterator[Path]:
    """Every entry under `top` in path order (names sorted in each directory, depth first),
    without following symlinks and without entering `.git`. Symlinks are not yielded."""
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIPPED_DIRS:
                    continue
                if include_dirs:
                    yield Path(entry.path)
                yield from walk_files(Path(entry.path), include_dirs=include_dirs)
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path)
        except OSError:
            continue
