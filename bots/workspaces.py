"""Channel workspaces: the directory each channel's tools work in.

Owns: `workspace_name` (readable, safe and unique per channel key) and `Workspaces`, which
makes each directory once per process (not a syscall on every run).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def workspace_name(channel_key: str) -> str:
    """A directory name for a channel: readable, safe, and unique per key."""
    readable = UNSAFE.sub("_", channel_key).strip("._")[:60] or "channel"
    digest = hashlib.sha256(channel_key.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


class Workspaces:
    """Workspace directories under `root`, one per channel key, made on first use."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._made: dict[str, Path] = {}

    def fix(self, channel_key: str, path: Path) -> None:
        """`channel_key` works in `path` (an existing directory) instead of one under root."""
        self._made[channel_key] = path

    def path(self, channel_key: str) -> Path:
        path = self._made.get(channel_key)
        if path is None:
            path = self._root / workspace_name(channel_key)
            path.mkdir(parents=True, exist_ok=True)
            self._made[channel_key] = path
        return path
