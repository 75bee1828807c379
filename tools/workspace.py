"""Keeping file tools, and the bot's own writes, inside their workspace.

Owns: the checks on path text (`check_path_text`: NUL bytes, `~`, look-alike characters,
over-long names), confined resolution (`locate`), the confined operations built on it (open a
file or directory, replace a file atomically, walk a tree) and the bot's own confined IO
(`write_file_in_workspace`, `read_file_in_workspace`, `make_dirs_in_workspace`).

Approach: directory file descriptors, openat-style, never a path reopened by name. A shared
workspace changes under our feet (sandboxed `bash` in the same batch, another thread of the
channel), so "resolve the path, then open it by name" is a check-then-use race: a directory
swapped for a symlink between the two steps sends the open outside. Instead:

- The workspace root is opened once (`O_DIRECTORY`); every path is walked from that descriptor
  one component at a time with `os.open(name, O_DIRECTORY | O_NOFOLLOW, dir_fd=parent)`, so no
  component is ever followed by the kernel. A component that is a symlink is read with
  `readlink(dir_fd=)` and its target walked the same way, logically: '..' pops to the directory
  descriptor we came from and never above the root; an absolute target must name a place
  inside the workspace. What the walk ends on is a descriptor that is inside by construction.
- Files are opened, created (`O_EXCL`), renamed (`src_dir_fd=`/`dst_dir_fd=`), listed
  (`os.scandir(fd)`) and made (`os.mkdir(dir_fd=)`) relative to those descriptors; a final
  name swapped for a symlink in the meantime fails `O_NOFOLLOW` (and is retried) or is
  replaced by the rename, never followed. Temporary files live in the target's directory
  descriptor, so a failed write cleans up there, not wherever a name now points.
- Tree walks (`walk_tree`) are iterative (no recursion limit) and bounded in depth.

Why not run the file tools inside bash's sandbox instead: the sandbox is optional (off, or no
bubblewrap), costs a process per call, and the bot's own writes (attachments, saved output)
happen outside any tool call. Descriptors work everywhere the tools run.

Limit, stated plainly: a directory already opened may be moved elsewhere by a process that can
see both places (not sandboxed bash: the workspace is its own mount there, and a rename across
mounts fails). Everything reached from it is then outside too; nothing here can prevent that.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import secrets
import stat
import unicodedata
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.tools import ToolError

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255
MAX_SYMLINK_HOPS = 40  # as the kernel's own limit
MAX_PATH_DEPTH = 512  # directories in one resolved path (one descriptor each while walking)


def _walk_depth() -> int:
    """Directories below the top of a find/grep walk. A walk holds one descriptor per level,
    so the depth is also a share of the open-file limit (many walks may run at once)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 256
    return max(32, min(256, soft // 16))


MAX_WALK_DEPTH = _walk_depth()
MAX_BOT_WRITE_BYTES = 64 * 1024 * 1024
_OPEN_ATTEMPTS = 4  # a final component that keeps changing under us: give up after this

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

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


def _symlink_refused(shown: str) -> ToolError:
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
    pending = deque(components)
    stack = [os.dup(root.fd)]
    names: list[str] = []
    hops = 0
    made = 0
    try:
        while pending:
            name = pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if not names:
                    raise _outside(raw)
                os.close(stack.pop())
                names.pop()
                continue
            final = all(rest in ("", ".") for rest in pending)
            here = stack[-1]
            if final:
                try:
                    info = os.stat(name, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                except OSError as exc:
                    raise _open_error(exc, "/".join([*names, name])) from None
                if info is not None and stat.S_ISLNK(info.st_mode):
                    if not follow_links:
                        raise _symlink_refused("/".join([*names, name]))
                    hops = _expand_link(root, raw, here, name, names, stack, pending, hops)
                    continue
                located = Located(stack.pop(), name, (*names, name))
                return located
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=here)
            except OSError as exc:
                shown = "/".join([*names, name])
                if exc.errno == errno.ENOENT and create_parents and made < MAX_PATH_DEPTH:
                    made += 1
                    with contextlib.suppress(FileExistsError):
                        _mkdir_at(here, name, shown)
                    pending.appendleft(name)  # open what is there now, whatever it is
                    continue
                if exc.errno == errno.ENOENT:
                    raise ToolError(f"Not found: '{shown}' does not exist.") from None
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise _open_error(exc, shown) from None
                try:
                    info = os.stat(name, dir_fd=here, follow_symlinks=False)
                except OSError:
                    pending.appendleft(name)  # it changed meanwhile: look again
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise _open_error(exc, shown) from None
                    continue
                if stat.S_ISDIR(info.st_mode):  # a link a moment ago, a directory again now
                    pending.appendleft(name)
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        changing = f"'{raw}' kept changing while it was being opened."
                        raise ToolError(changing) from None
                    continue
                if not stat.S_ISLNK(info.st_mode):
                    raise ToolError(
                        f"'{shown}' is {describe_kind(info.st_mode)}, not a directory, so it "
                        "cannot be a parent in the path."
                    ) from None
                if not follow_links:
                    raise _symlink_refused(shown) from None
                hops = _expand_link(root, raw, here, name, names, stack, pending, hops)
                continue
            stack.append(fd)
            names.append(name)
            if len(names) > MAX_PATH_DEPTH:
                raise ToolError(f"The path is nested too deeply (over {MAX_PATH_DEPTH} levels).")
        # The path is a directory (or the root) itself: hand back its parent and name.
        if not names:
            return Located(stack.pop(), None, ())
        os.close(stack.pop())
        return Located(stack.pop(), names[-1], tuple(names))
    finally:
        for fd in stack:
            os.close(fd)


def _expand_link(
    root: Root,
    raw: str,
    here: int,
    name: str,
    names: list[str],
    stack: list[int],
    pending: deque[str],
    hops: int,
) -> int:
    """Put a symlink's target in front of the pending components (logically, confined)."""
    hops += 1
    if hops > MAX_SYMLINK_HOPS:
        raise ToolError(f"'{raw}' is a symbolic link that loops; it cannot be used.")
    try:
        target = os.readlink(name, dir_fd=here)
    except OSError:
        pending.appendleft(name)  # no longer a link: walk it again
        return hops
    if not target:
        raise ToolError(f"'{raw}' contains an empty symbolic link.")
    if target.startswith("/"):
        below = root.inside(target)  # its '..' are walked logically, never above the root
        if below is None:
            raise _outside(raw)
        while len(stack) > 1:
            os.close(stack.pop())
        names.clear()
        pending.extendleft(reversed(below))
    else:
        pending.extendleft(reversed(target.split("/")))
    return hops


def _mkdir_at(dir_fd: int, name: str, shown: str) -> None:
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


def _open_error(exc: OSError, shown: str) -> ToolError:
    if exc.errno == errno.ELOOP:
        return ToolError(f"Access denied: '{shown}' is a symbolic link.")
    if exc.errno == errno.EISDIR:
        return ToolError(f"'{shown}' is a directory, not a file.")
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"The path '{shown}' is too long.")
    return ToolError(f"Cannot use '{shown}': {exc.strerror}.")


# -- confined operations (blocking: call them in a thread) ---------------------------------


def open_file(root: Root, raw: str, *, follow_links: bool = True) -> tuple[int, str]:
    """A descriptor of the regular file `raw` names, opened for reading, and its shown path."""
    for _ in range(_OPEN_ATTEMPTS):
        with locate(root, raw, follow_links=follow_links) as at:
            if at.name is None:
                raise ToolError("The path names the workspace directory itself, not a file.")
            try:
                info = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise ToolError(f"File not found: '{at.shown}'.") from None
            except OSError as exc:
                raise _open_error(exc, at.shown) from None
            if stat.S_ISLNK(info.st_mode):
                continue  # became a link after `locate` looked: walk again
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(
                    f"'{at.shown}' is {describe_kind(info.st_mode)}, not a regular file."
                )
            try:
                fd = os.open(at.name, _FILE_FLAGS, dir_fd=at.dir_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue
                raise _open_error(exc, at.shown) from None
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(
                        f"'{at.shown}' is {describe_kind(info.st_mode)}, not a regular file."
                    )
                os.set_blocking(fd, True)
            except BaseException:
                os.close(fd)
                raise
            return fd, at.shown
    raise ToolError(f"'{raw}' kept changing while it was being opened; try again.")


def open_dir(root: Root, raw: str) -> tuple[int, str]:
    """A descriptor of the directory `raw` names, and its shown path."""
    for _ in range(_OPEN_ATTEMPTS):
        with locate(root, raw) as at:
            if at.name is None:
                return os.dup(at.dir_fd), "."
            try:
                return os.open(at.name, _DIR_FLAGS, dir_fd=at.dir_fd), at.shown
            except FileNotFoundError:
                raise ToolError(f"Directory not found: '{at.shown}'.") from None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise ToolError(f"Cannot list '{at.shown}': {exc.strerror}.") from None
                try:
                    info = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode):
                    continue  # it changed meanwhile: look again
                raise ToolError(
                    f"'{at.shown}' is {describe_kind(info.st_mode)}, not a directory."
                ) from None
    raise ToolError(f"'{raw}' kept changing while it was being opened; try again.")


_READ_CHUNK = 1024 * 1024


def read_fd(fd: int, shown: str, *, max_bytes: int) -> bytes:
    """Read a whole file descriptor (closing it), refusing more than `max_bytes`. A buffer the
    file's size is allocated, not one of `max_bytes` (a small file read under a 64 MB cap
    cost 64 MB); a file that grows meanwhile is read on in chunks up to the cap."""
    too_large = f"'{shown}' is larger than {_mb(max_bytes)}; use grep to search it."
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise ToolError(too_large)
        chunks = [handle.read(size + 1)] if size else []
        total = sum(len(chunk) for chunk in chunks)
        while total <= max_bytes:
            more = handle.read(min(_READ_CHUNK, max_bytes + 1 - total))
            if not more:
                break
            chunks.append(more)
            total += len(more)
    if total > max_bytes:
        raise ToolError(too_large)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_file(root: Root, raw: str, *, max_bytes: int) -> tuple[bytes, str]:
    fd, shown = open_file(root, raw)
    return read_fd(fd, shown, max_bytes=max_bytes), shown


def replace_file(
    root: Root,
    raw: str,
    data: bytes,
    *,
    follow_links: bool = True,
    create_parents: bool = True,
    unique: bool = False,
) -> tuple[bool, str]:
    """Replace (or create) the regular file `raw` atomically; (created, shown path).

    The content goes to a temporary file created with `O_EXCL` in the target's directory
    descriptor, which is then renamed over the target in that same directory, so a reader
    never sees half a file and a name swapped for a symlink meanwhile is replaced, not
    followed. With `unique`, an existing file is kept and the content gets a free name
    `stem-N.suffix` instead (atomically: a hard link that fails if the name is taken)."""
    for _ in range(_OPEN_ATTEMPTS):
        with locate(root, raw, follow_links=follow_links, create_parents=create_parents) as at:
            if at.name is None:
                raise ToolError("The path names the workspace itself; give a file name.")
            mode = 0o644
            try:
                info = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                created = True
            except OSError as exc:
                raise _open_error(exc, at.shown) from None
            else:
                if stat.S_ISLNK(info.st_mode):
                    if not follow_links:
                        raise _symlink_refused(at.shown)
                    continue  # became a link after `locate` looked: walk again
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(
                        f"'{at.shown}' is {describe_kind(info.st_mode)}, not a regular file."
                    )
                created, mode = unique, stat.S_IMODE(info.st_mode)
            try:
                name = _write_temp_then_rename(at.dir_fd, at.name, at.shown, data, mode, unique)
            except _DirectoryGone:
                continue  # removed or replaced while we wrote into it: walk again
            return created, "/".join((*at.parts[:-1], name))
    raise ToolError(f"'{raw}' kept changing while it was being written; try again.")


class _DirectoryGone(Exception):
    """The directory we were writing into was deleted meanwhile."""


def _write_temp_then_rename(
    dir_fd: int, name: str, shown: str, data: bytes, mode: int, unique: bool
) -> str:
    temp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(temp, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _DirectoryGone from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
        if not unique:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return name
        stem, dot, suffix = name.rpartition(".")
        if not stem:  # ".env" or "README": no suffix
            stem, dot, suffix = name, "", ""
        for counter in range(1000):
            candidate = name if counter == 0 else f"{stem}-{counter}{dot}{suffix}"
            try:
                os.link(temp, candidate, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except FileExistsError:
                continue
            return candidate
        raise ToolError(f"No free name for '{shown}' (tried 1,000).")
    except FileNotFoundError:
        raise _DirectoryGone from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)


def _mb(size: int) -> str:
    return f"{size // (1024 * 1024)} MB"


# -- the bot's own IO ----------------------------------------------------------------------


def _bot_path(relative_path: str) -> str:
    if relative_path.startswith("/") or ".." in relative_path.split("/"):
        raise ToolError(
            f"'{relative_path}' must be a plain path inside the workspace (no '/' at the start, "
            "no '..')."
        )
    return relative_path


def write_file_in_workspace(
    root: Path,
    relative_path: str,
    data: bytes,
    *,
    max_bytes: int = MAX_BOT_WRITE_BYTES,
    unique: bool = False,
) -> str:
    """THE confined path for every file the bot writes on its own behalf (attachments, saved
    command output, backfilled files); blocking, call it in a thread.

    Never follows a symlink anywhere in the path (a link is refused with a clear `ToolError`,
    and nothing is written); creates missing parent directories the same way; writes a
    temporary file in the target directory and renames it into place, so the file appears
    whole or not at all. With `unique`, an existing file is kept and a free name `stem-N.ext`
    is used. Returns the workspace-relative path actually written."""
    if len(data) > max_bytes:
        raise ToolError(
            f"'{relative_path}' would be {len(data):,} bytes; at most {max_bytes:,} bytes may "
            "be saved."
        )
    with Root(root) as opened:
        _, written = replace_file(
            opened, _bot_path(relative_path), data, follow_links=False, unique=unique
        )
    return written


def read_file_in_workspace(root: Path, relative_path: str, *, max_bytes: int) -> bytes:
    """A file the bot saved earlier, read without following any symlink (blocking)."""
    with Root(root) as opened:
        fd, shown = open_file(opened, _bot_path(relative_path), follow_links=False)
        return read_fd(fd, shown, max_bytes=max_bytes)


def make_dirs_in_workspace(root: Path, relative_path: str) -> None:
    """Create a directory and its parents, refusing any symlink on the way (blocking)."""
    with (
        Root(root) as opened,
        locate(opened, _bot_path(relative_path), follow_links=False, create_parents=True) as at,
    ):
        if at.name is None:
            return
        with contextlib.suppress(FileExistsError):
            _mkdir_at(at.dir_fd, at.name, at.shown)
        info = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise ToolError(f"'{at.shown}' is {describe_kind(info.st_mode)}, not a directory.")


# -- walking a tree ------------------------------------------------------------------------

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
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
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
        fd = os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)
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


# -- for callers that still think in paths -------------------------------------------------


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """Where `raw` lands inside the workspace, as a path: for messages and for callers that
    then use the confined operations above. Never open the returned path by name."""
    with Root(workspace) as root, locate(root, raw) as at:
        return root.path.joinpath(*at.parts)


def display_path(workspace: Path, path: Path) -> str:
    """`path` relative to the workspace, for messages ('.' for the workspace itself)."""
    root = Path(os.path.realpath(workspace))
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    return str(rel) if rel.parts else "."


def write_regular_file(path: Path, root: Path, shown: str, data: bytes) -> bool:
    """Replace (or create) the file at `path` (inside `root`) through the confined walk; True
    if it was created. Kept for callers written before `write_file_in_workspace`."""
    real_root = workspace_root(root)
    try:
        relative = path.relative_to(real_root).as_posix()
    except ValueError:
        raise ToolError(f"Access denied: '{shown}' lies outside the workspace.") from None
    with Root(real_root) as opened:
        created, _ = replace_file(opened, relative, data)
    return created
