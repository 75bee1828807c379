"""Confined path resolution: the checks on path text and the walk that turns a path into a
directory descriptor and a final name, never letting the kernel follow a link.

Owns: `check_path_text` (NUL bytes, `~`, look-alike characters, over-long names),
`workspace_root`, `Root` (an open workspace), `Located` and `locate` (the walk), and the
wording of the refusals the confined operations share (`open_error`, `symlink_refused`,
`describe_kind`). Why descriptors, and what the walk guarantees: `tools.workspace`'s docstring.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import unicodedata
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from core.tools import ToolError

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255
MAX_SYMLINK_HOPS = 40  # as the kernel's own limit
MAX_PATH_DEPTH = 512  # directories in one resolved path (one descriptor each while walking)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

# Characters that reorder or hide text: a name containing them does not look like what it is.
_INVISIBLE = frozenset(
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff"
)
# Path syntax a look-alike character could impersonate.
_SYNTAX = frozenset("./\\~:")


def check_path_text(raw: str) -> None:
    """Refuse path text that is unsafe or misleading before touching the filesystem."""
    if not raw:
        raise ToolError(
            "The path is empty. Give a path relative to the workspace, e.g. 'notes.md'."
        )
    if "\x00" in raw:
        raise ToolError("The path contains a NUL byte, which no file name may contain.")
    if any(unicodedata.category(ch) == "Cc" for ch in raw):
        raise ToolError("The path contains control characters (such as a newline or tab).")
    if any(ch in _INVISIBLE for ch in raw):
        raise ToolError(
            "The path contains invisible or text-direction characters; use the plain file name."
        )
    if raw.startswith("~"):
        raise ToolError(
            "Paths starting with '~' (a home directory) are not allowed; every path is relative "
            "to the workspace."
        )
    if "\\" in raw:
        raise ToolError("The path contains '\\'; use '/' to separate directories.")
    if len(raw) > MAX_PATH_CHARS:
        raise ToolError(f"The path is too long ({len(raw)} characters; at most {MAX_PATH_CHARS}).")
    for name in raw.split("/"):
        if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise ToolError(
                f"A name in the path is too long (over {MAX_NAME_BYTES} bytes): '{name[:40]}…'."
            )
    for ch in raw:
        if ord(ch) < 128:
            continue
        folded = unicodedata.normalize("NFKC", ch)
        if any(c in _SYNTAX for c in folded):
            raise ToolError(
                f"The path contains the look-alike character '{ch}' (U+{ord(ch):04X}), which "
                f"imitates '{folded}'; use plain ASCII path syntax."
            )


def workspace_root(workspace: Path) -> Path:
    """The workspace's real path (symlinks resolved); it must exist and be a directory."""
    root = Path(os.path.realpath(workspace))
    if not root.is_dir():
        raise ToolError(f"The workspace directory {workspace} does not exist.")
    return root


class Root:
    """An open workspace: every confined operation starts from its descriptor.

    Use as a context manager (blocking; in a thread) or call `close`."""

    __slots__ = ("fd", "given", "path")

    def __init__(self, workspace: Path) -> None:
        self.given = Path(os.path.abspath(workspace))
        self.path = workspace_root(workspace)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ToolError(f"The workspace directory cannot be opened: {exc.strerror}.") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inside(self, absolute: str) -> list[str] | None:
        """The components of an absolute path below the workspace, or None if it is not
        below it (compared as text: the workspace as given or its real path)."""
        for base in {str(self.path), str(self.given)}:
            if absolute == base:
                return []
            prefix = base.rstrip("/") + "/"
            if absolute.startswith(prefix):
                return absolute[len(prefix) :].split("/")
        return None


@dataclass(slots=True)
class Located:
    """Where a path ends: an open descriptor of the directory holding the final entry (owned:
    close it) and that entry's name (None when the path is the workspace itself). `parts` are
    the real components from the workspace root, for messages."""

    dir_fd: int
    name: str | None
    parts: tuple[str, ...]

    @property
    def shown(self) -> str:
        return "/".join(self.parts) or "."

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _outside(raw: str) -> ToolError:
    how = "is absolute and" if raw.startswith("/") else "resolves to a place that"
    return ToolError(
        f"Access denied: '{raw}' {how} lies outside the workspace. Only files inside the "
        "workspace can be used; give a path relative to it."
    )


def symlink_refused(shown: str) -> ToolError:
    return ToolError(
        f"Access denied: '{shown}' is a symbolic link, and this path must not contain any."
    )


def locate(
    root: Root, raw: str, *, follow_links: bool = True, create_parents: bool = False
) -> Located:
    """Walk `raw` from the workspace root without the kernel ever following a link (blocking).

    With `follow_links`, symlinks inside the path (the final one included) are followed
    logically and must stay inside; without it, any symlink is refused. `create_parents` makes
    missing directories on the way (confined the same way). The final entry need not exist.
    """
    check_path_text(raw)
    components = root.inside(raw) if raw.startswith("/") else raw.split("/")
    if components is None:
        raise _outside(raw)
    walk = _Walk(root, raw, components, follow_links=follow_links, create_parents=create_parents)
    try:
        return walk.run()
    finally:
        walk.close()


class _Walk:
    """One `locate` in progress: the components still to walk, a descriptor per directory
    walked so far (the root's first; owned, closed by `close` unless handed out), their names,
    and the symlink hops and directories made so far (both bounded)."""

    __slots__ = (
        "create_parents",
        "follow_links",
        "hops",
        "made",
        "names",
        "pending",
        "raw",
        "root",
        "stack",
    )

    def __init__(
        self,
        root: Root,
        raw: str,
        components: list[str],
        *,
        follow_links: bool,
        create_parents: bool,
    ) -> None:
        self.root = root
        self.raw = raw
        self.follow_links = follow_links
        self.create_parents = create_parents
        self.pending = deque(components)
        self.stack = [os.dup(root.fd)]
        self.names: list[str] = []
        self.hops = 0
        self.made = 0

    def close(self) -> None:
        for fd in self.stack:
            os.close(fd)

    def run(self) -> Located:
        while self.pending:
            name = self.pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                self._up()
            elif all(rest in ("", ".") for rest in self.pending):
                located = self._final(name)
                if located is not None:
                    return located
            else:
                self._enter(name)
        # The path is a directory (or the root) itself: hand back its parent and name.
        if not self.names:
            return Located(self.stack.pop(), None, ())
        os.close(self.stack.pop())
        return Located(self.stack.pop(), self.names[-1], tuple(self.names))

    def _shown(self, name: str) -> str:
        return "/".join([*self.names, name])

    def _up(self) -> None:
        """'..': back to the directory we came from, never above the root."""
        if not self.names:
            raise _outside(self.raw)
        os.close(self.stack.pop())
        self.names.pop()

    def _final(self, name: str) -> Located | None:
        """The last component: where the path ends, or None when it was a link now expanded."""
        here = self.stack[-1]
        try:
            info = os.stat(name, dir_fd=here, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise open_error(exc, self._shown(name)) from None
        if info is not None and stat.S_ISLNK(info.st_mode):
            if not self.follow_links:
                raise symlink_refused(self._shown(name))
            self._expand_link(here, name)
            return None
        return Located(self.stack.pop(), name, (*self.names, name))

    def _enter(self, name: str) -> None:
        """A directory on the way: opened with `O_NOFOLLOW`, or dealt with if it is not one."""
        here = self.stack[-1]
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=here)
        except OSError as exc:
            self._not_entered(here, name, exc)
            return
        self.stack.append(fd)
        self.names.append(name)
        if len(self.names) > MAX_PATH_DEPTH:
            raise ToolError(f"The path is nested too deeply (over {MAX_PATH_DEPTH} levels).")

    def _not_entered(self, here: int, name: str, exc: OSError) -> None:
        """Why a directory on the way did not open: missing (made, with `create_parents`), a
        link (expanded), changed meanwhile (looked at again), or refused."""
        shown = self._shown(name)
        if exc.errno == errno.ENOENT and self.create_parents and self.made < MAX_PATH_DEPTH:
            self.made += 1
            with contextlib.suppress(FileExistsError):
                mkdir_at(here, name, shown)
            self.pending.appendleft(name)  # open what is there now, whatever it is
            return
        if exc.errno == errno.ENOENT:
            raise ToolError(f"Not found: '{shown}' does not exist.") from None
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise open_error(exc, shown) from None
        try:
            info = os.stat(name, dir_fd=here, follow_symlinks=False)
        except OSError:
            self.pending.appendleft(name)  # it changed meanwhile: look again
            self.hops += 1
            if self.hops > MAX_SYMLINK_HOPS:
                raise open_error(exc, shown) from None
            return
        if stat.S_ISDIR(info.st_mode):  # a link a moment ago, a directory again now
            self.pending.appendleft(name)
            self.hops += 1
            if self.hops > MAX_SYMLINK_HOPS:
                changing = f"'{self.raw}' kept changing while it was being opened."
                raise ToolError(changing) from None
            return
        if not stat.S_ISLNK(info.st_mode):
            raise ToolError(
                f"'{shown}' is {describe_kind(info.st_mode)}, not a directory, so it "
                "cannot be a parent in the path."
            ) from None
        if not self.follow_links:
            raise symlink_refused(shown) from None
        self._expand_link(here, name)

    def _expand_link(self, here: int, name: str) -> None:
        """Put a symlink's target in front of the pending components (logically, confined)."""
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise ToolError(f"'{self.raw}' is a symbolic link that loops; it cannot be used.")
        try:
            target = os.readlink(name, dir_fd=here)
        except OSError:
            self.pending.appendleft(name)  # no longer a link: walk it again
            return
        if not target:
            raise ToolError(f"'{self.raw}' contains an empty symbolic link.")
        if target.startswith("/"):
            # Its '..' are walked logically, never above the root.
            below = self.root.inside(target)
            if below is None:
                raise _outside(self.raw)
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            self.names.clear()
            self.pending.extendleft(reversed(below))
        else:
            self.pending.extendleft(reversed(target.split("/")))


def mkdir_at(dir_fd: int, name: str, shown: str) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        raise
    except OSError as exc:
        raise ToolError(f"Cannot create the directory '{shown}': {exc.strerror}.") from None


def describe_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def open_error(exc: OSError, shown: str) -> ToolError:
    if exc.errno == errno.ELOOP:
        return ToolError(f"Access denied: '{shown}' is a symbolic link.")
    if exc.errno == errno.EISDIR:
        return ToolError(f"'{shown}' is a directory, not a file.")
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"The path '{shown}' is too long.")
    return ToolError(f"Cannot use '{shown}': {exc.strerror}.")
