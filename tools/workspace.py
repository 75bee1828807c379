"""Keeping file tools inside their workspace.

Owns: `resolve_in_workspace` (a path the model gave → an absolute path inside the workspace, or
a `ToolError` saying why not), the checks on the path text itself (NUL bytes, `~`, look-alike
characters, over-long names), opening files with the final component never followed
(`open_regular_file`), and `display_path` for messages.

Rules:
- Symlinks are resolved, in every component, also for a target that does not exist yet; the
  result must lie inside the workspace's real path.
- Only regular files are read or written: devices, FIFOs and sockets are refused before they
  are opened (a FIFO would block the open), and checked again on the open descriptor.
- After resolving, files are opened with `O_NOFOLLOW` so a final component swapped for a symlink
  in the meantime fails instead of being followed; on Linux the open descriptor's real path is
  checked against the workspace once more (a parent swapped in between is caught too).

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import unicodedata
from pathlib import Path

from core.tools import ToolError

MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255

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


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """Resolve `raw` (relative to the workspace, or absolute inside it) to a real path.

    Every symlink on the way is followed, including a dangling one at the end, so the result is
    where an operation would really land. Anything outside the workspace is refused.
    """
    check_path_text(raw)
    root = workspace_root(workspace)
    candidate = Path(raw) if raw.startswith("/") else root / raw
    try:
        resolved = Path(os.path.realpath(candidate))
    except (OSError, ValueError) as exc:  # symlink loops on some Pythons, odd encodings
        raise ToolError(f"The path '{raw}' cannot be resolved: {exc}.") from None
    if os.path.islink(resolved):  # realpath stops only at a loop
        raise ToolError(f"'{raw}' is a symbolic link that loops; it cannot be used.")
    if resolved != root and not resolved.is_relative_to(root):
        how = "is absolute and" if raw.startswith("/") else "resolves to a place that"
        raise ToolError(
            f"Access denied: '{raw}' {how} lies outside the workspace. Only files inside the "
            "workspace can be used; give a path relative to it."
        )
    return resolved


def display_path(workspace: Path, path: Path) -> str:
    """`path` relative to the workspace, for messages ('.' for the workspace itself)."""
    root = Path(os.path.realpath(workspace))
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    return str(rel) if rel.parts else "."


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


def check_fd_inside(fd: int, root: Path, shown: str) -> None:
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return  # no /proc: the resolve-time check stands alone
    if real != root and not real.is_relative_to(root):
        raise ToolError(f"Access denied: '{shown}' changed to point outside the workspace.")


def open_regular_file(path: Path, root: Path, shown: str) -> int:
    """Open a resolved path for reading as a regular file and return the descriptor (blocking;
    call it in a thread)."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        raise ToolError(f"File not found: '{shown}'.") from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    if not stat.S_ISREG(existing.st_mode):
        raise ToolError(f"'{shown}' is {describe_kind(existing.st_mode)}, not a regular file.")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _open_error(exc, shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"'{shown}' is {describe_kind(info.st_mode)}, not a regular file.")
        check_fd_inside(fd, root, shown)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: Path, root: Path, shown: str, *, max_bytes: int) -> bytes:
    """The whole content of a regular file inside the workspace (blocking)."""
    fd = open_regular_file(path, root, shown)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ToolError(
            f"'{shown}' is larger than {max_bytes // (1024 * 1024)} MB; use grep to search it."
        )
    return data


def write_regular_file(path: Path, root: Path, shown: str, data: bytes) -> bool:
    """Replace (or create) a regular file inside the workspace atomically; True if it was
    created. Parent directories are created. The new content is written to a temporary file
    beside the target and renamed over it, so a reader never sees half a file and a symlink
    swapped in at the last moment is replaced, not followed (blocking)."""
    mode = 0o644
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        created = True
    except NotADirectoryError:
        raise ToolError(f"Cannot create '{shown}': a parent of it is a file.") from None
    else:
        if not stat.S_ISREG(existing.st_mode):
            raise ToolError(f"'{shown}' is {describe_kind(existing.st_mode)}, not a regular file.")
        created, mode = False, stat.S_IMODE(existing.st_mode)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"Cannot create '{shown}': a parent of it is a file.") from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    # The parent may have been created through a symlink swapped in meanwhile: check again.
    parent = Path(os.path.realpath(path.parent))
    if parent != root and not parent.is_relative_to(root):
        raise ToolError(f"Access denied: '{shown}' changed to point outside the workspace.")
    temp = parent / f".{path.name[:200]}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temp, flags, 0o600)
    except OSError as exc:
        raise _open_error(exc, shown) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            check_fd_inside(handle.fileno(), root, shown)
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return created


def _open_error(exc: OSError, shown: str) -> ToolError:
    if exc.errno == errno.ELOOP:
        return ToolError(f"Access denied: '{shown}' is a symbolic link.")
    if exc.errno == errno.EISDIR:
        return ToolError(f"'{shown}' is a directory, not a file.")
    if exc.errno == errno.ENAMETOOLONG:
        return ToolError(f"The path '{shown}' is too long.")
    return ToolError(f"Cannot use '{shown}': {exc.strerror}.")
