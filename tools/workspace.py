"""Keeping file tools, and the bot's own writes, inside their workspace.

Owns: the confined operations (open a file or directory, read it bounded, replace a file
atomically) and the bot's own confined IO (`write_file_in_workspace`, `read_file_in_workspace`,
`make_dirs_in_workspace`). They are built on `tools.workspace_paths` (the checks on path text,
`Root`, confined resolution with `locate`); tree walks are `tools.workspace_walk`'s. The names
of both are re-exported here, so a tool imports everything confined from this module.

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

Must not: import anything of ours outside `core` and `tools.workspace_*`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from core.tools import ToolError
from tools.workspace_paths import (
    DIR_FLAGS,
    FILE_FLAGS,
    MAX_NAME_BYTES,
    MAX_PATH_CHARS,
    MAX_PATH_DEPTH,
    MAX_SYMLINK_HOPS,
    Located,
    Root,
    check_path_text,
    describe_kind,
    locate,
    mkdir_at,
    open_error,
    symlink_refused,
    workspace_root,
)
from tools.workspace_walk import (
    MAX_WALK_DEPTH,
    SKIPPED_DIRS,
    WalkEntry,
    WalkStats,
    open_entry,
    walk_tree,
)

__all__ = [
    "MAX_BOT_WRITE_BYTES",
    "MAX_NAME_BYTES",
    "MAX_PATH_CHARS",
    "MAX_PATH_DEPTH",
    "MAX_SYMLINK_HOPS",
    "MAX_WALK_DEPTH",
    "SKIPPED_DIRS",
    "Located",
    "Root",
    "WalkEntry",
    "WalkStats",
    "check_path_text",
    "describe_kind",
    "display_path",
    "locate",
    "make_dirs_in_workspace",
    "open_dir",
    "open_entry",
    "open_file",
    "read_fd",
    "read_file",
    "read_file_in_workspace",
    "replace_file",
    "resolve_in_workspace",
    "walk_tree",
    "workspace_root",
    "write_file_in_workspace",
    "write_regular_file",
]

MAX_BOT_WRITE_BYTES = 64 * 1024 * 1024
_OPEN_ATTEMPTS = 4  # a final component that keeps changing under us: give up after this
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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
                raise open_error(exc, at.shown) from None
            if stat.S_ISLNK(info.st_mode):
                continue  # became a link after `locate` looked: walk again
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(
                    f"'{at.shown}' is {describe_kind(info.st_mode)}, not a regular file."
                )
            try:
                fd = os.open(at.name, FILE_FLAGS, dir_fd=at.dir_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue
                raise open_error(exc, at.shown) from None
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
                return os.open(at.name, DIR_FLAGS, dir_fd=at.dir_fd), at.shown
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
                raise open_error(exc, at.shown) from None
            else:
                if stat.S_ISLNK(info.st_mode):
                    if not follow_links:
                        raise symlink_refused(at.shown)
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
        raise open_error(exc, shown) from None
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
        raise open_error(exc, shown) from None
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
            mkdir_at(at.dir_fd, at.name, at.shown)
        info = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise ToolError(f"'{at.shown}' is {describe_kind(info.st_mode)}, not a directory.")


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
