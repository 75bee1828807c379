"""The grep tool: search file contents in the workspace with a regular expression.

Owns: `GrepTool` and its two engines, ripgrep (when `rg` is installed) and pure Python. Both
search the same files in the same order and report the same matches: every regular file under
the path (hidden ones included, .git and symlinks skipped, files containing NUL bytes treated
as binary and skipped), names sorted per directory, one result per matching line.

Confinement: neither engine is given a path to walk. The files are found by the confined,
descriptor-based walk of `tools.workspace` (in a worker thread) and opened there; the open
descriptors are handed to the engine process in batches (`pass_fds`), which reads them as
`/proc/self/fd/N` (ripgrep) or by number (the Python worker). A directory swapped for a link
meanwhile is never followed, because nothing is looked up by name any more.

Denial of service: the Python engine runs in a child process (`tools/grep_worker.py`), since
Python's `re` holds the GIL for a whole catastrophic search and a thread would freeze the
event loop; the process is killed when `python_timeout_s` passes or the tool is cancelled
(its timeout). Ripgrep's regex engine is linear-time. The walk is iterative and depth-bounded.

Ripgrep's exit status: it used to be lost now and then ("Unknown child process", returncode
255), turning a lookaround pattern rg refuses into a wrong "No matches". The cause was ours:
after rg closed its output we called `proc.kill()` while the child watcher had not reaped it
yet; `Popen.send_signal` polls first, so it reaped the child itself and the watcher's own
`waitpid` found nothing. Now rg is only killed when we stop reading early, and a refused
pattern is recognised from rg's message, not from the exit code alone.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import resource
import shutil
import stat
import sys
import threading
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from tools.globs import GlobMatcher, compile_glob
from tools.truncation import DEFAULT_MAX_BYTES, format_size, truncate_head
from tools.workspace import (
    MAX_WALK_DEPTH,
    Root,
    WalkStats,
    locate,
    open_dir,
    open_entry,
    open_file,
    walk_tree,
)

MAX_LINE_CHARS = 500
MAX_FILE_BYTES = 32 * 1024 * 1024


def _batch_files() -> int:
    """Descriptors handed to one engine process: a share of the open-file limit, so that many
    greps at once never run out (a file that cannot be opened would be skipped silently)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 32))


BATCH_FILES = _batch_files()
PYTHON_TIMEOUT_S = 30.0
_WORKER = Path(__file__).with_name("grep_worker.py")

Engine = Literal["auto", "ripgrep", "python"]


@dataclass(frozen=True, slots=True)
class Match:
    path: str  # relative to the workspace
    line: int
    text: str  # at most MAX_LINE_CHARS characters of the line
    chars: int  # the whole line's length


@dataclass(slots=True)
class _File:
    fd: int
    path: str  # relative to the workspace


class GrepParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        description="Regular expression to search for (or plain text with literal)."
    )
    path: str = Field(
        default=".", description="File or directory to search, relative to the workspace."
    )
    glob: str | None = Field(
        default=None,
        description="Only search files matching this glob, e.g. '*.py' or 'src/**/*.ts'.",
    )
    ignore_case: bool = Field(default=False, description="Match case-insensitively.")
    literal: bool = Field(
        default=False, description="Treat the pattern as plain text, not a regex."
    )
    limit: int = Field(default=100, ge=1, le=1000, description="Maximum number of matching lines.")


class GrepTool(AgentTool[GrepParams]):
    name: ClassVar[str] = "grep"
    label: ClassVar[str] = "Grep"
    description: ClassVar[str] = (
        "Search the contents of workspace files for a regular expression. Returns matching "
        "lines as 'path:line: text', paths relative to the workspace, sorted by path. Options: "
        "`glob` to filter files, `ignore_case`, `literal` for plain text. At most `limit` "
        f"matching lines (default 100); lines longer than {MAX_LINE_CHARS} characters are cut. "
        "Binary files, .git and symbolic links are skipped."
    )
    parameters: ClassVar[type[BaseModel]] = GrepParams

    def __init__(
        self,
        *,
        engine: Engine = "auto",
        rg_path: str | None = None,
        python_timeout_s: float = PYTHON_TIMEOUT_S,
    ) -> None:
        self.engine = engine
        self.rg_path = rg_path if rg_path is not None else shutil.which("rg")
        self.python_timeout_s = python_timeout_s

    def summarize(self, params: GrepParams) -> str:
        where = "" if params.path in (".", "") else f" in {params.path}"
        return f"Grep /{params.pattern}/{where}"

    async def execute(self, call_id: str, params: GrepParams, ctx: ToolContext) -> ToolResult:
        source = re.escape(params.pattern) if params.literal else params.pattern
        try:
            re.compile(source, re.IGNORECASE if params.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"Invalid regular expression: {exc}.") from None
        except RecursionError:
            raise ToolError("The regular expression is nested too deeply.") from None
        engine = self.engine
        if engine == "auto":
            engine = "ripgrep" if self.rg_path else "python"
        if engine == "ripgrep" and not self.rg_path:
            raise ToolError("ripgrep (rg) is not installed.")
        stats = WalkStats()
        files, shown = await asyncio.to_thread(_start_walk, ctx, params, stats)
        found: list[Match] = []
        deadline = asyncio.get_running_loop().time() + self.python_timeout_s
        try:
            while len(found) <= params.limit:
                batch = await asyncio.to_thread(files.next_batch)
                files.claim()
                if not batch:
                    break
                try:
                    wanted = params.limit + 1 - len(found)
                    matches: list[Match] | None = None
                    if engine == "ripgrep":
                        assert self.rg_path is not None
                        matches = await _search_rg(self.rg_path, batch, params, wanted)
                        if matches is None:
                            engine = "python"  # rg refused a pattern Python accepts
                    if matches is None:
                        matches = await _search_python(
                            batch, source, params, wanted, deadline, self.python_timeout_s
                        )
                    found.extend(matches)
                finally:
                    for file in batch:
                        with contextlib.suppress(OSError):
                            os.close(file.fd)
        finally:
            await asyncio.to_thread(files.close)
        return _render(found, params, shown, engine, stats.too_deep)


class _Files:
    """The files to search, handed out in batches from a worker thread. If the tool is
    cancelled while a batch is being made, `close` (which waits for it) closes that batch's
    descriptors too; a walk never started is closed when collected."""

    def __init__(self, files: Generator[_File, None, None], fd: int) -> None:
        self._files = files
        self._fd = fd  # the file or top directory the walk starts from; ours to close
        self._lock = threading.Lock()
        self._unclaimed: list[_File] = []
        self._closed = False

    def next_batch(self) -> list[_File]:
        with self._lock:
            if self._closed:
                return []
            batch: list[_File] = []
            for file in self._files:
                batch.append(file)
                if len(batch) >= BATCH_FILES:
                    break
            self._unclaimed = batch
            return batch

    def claim(self) -> None:
        """The batch last made now belongs to the caller."""
        self._unclaimed = []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for file in self._unclaimed:
                with contextlib.suppress(OSError):
                    os.close(file.fd)
            self._unclaimed = []
            self._files.close()
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        if not self._closed:
            self.close()


def _start_walk(ctx: ToolContext, params: GrepParams, stats: WalkStats) -> tuple[_Files, str]:
    """The files to search, opened one by one as the walk goes (blocking)."""
    with Root(ctx.workspace) as root:
        with locate(root, params.path) as at:
            shown = at.shown
            if at.name is None:
                kind = "dir"
            else:
                try:
                    mode = os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False).st_mode
                except OSError:
                    raise ToolError(f"Path not found: '{shown}'.") from None
                if stat.S_ISDIR(mode):
                    kind = "dir"
                elif stat.S_ISREG(mode):
                    kind = "file"
                else:
                    raise ToolError(f"'{shown}' is not a regular file or directory.")
        if kind == "file":
            fd, shown = open_file(root, params.path)
            return _Files(_one_file(fd, shown), fd), shown
        wanted = compile_glob(params.glob) if params.glob else None
        top, shown = open_dir(root, params.path)
    return _Files(_files_under(top, shown, wanted, stats), top), shown


def _one_file(fd: int, shown: str) -> Generator[_File, None, None]:
    if os.fstat(fd).st_size <= MAX_FILE_BYTES:
        yield _File(os.dup(fd), shown)  # the batch closes its copy; `_Files` closes `fd`


def _files_under(
    top: int, shown: str, wanted: GlobMatcher | None, stats: WalkStats
) -> Generator[_File, None, None]:
    prefix = "" if shown == "." else shown + "/"
    for entry in walk_tree(top, stats=stats):
        if wanted is not None and not wanted(entry.rel):
            continue
        fd = open_entry(entry)
        if fd is None:
            continue
        if os.fstat(fd).st_size > MAX_FILE_BYTES:
            os.close(fd)
            continue
        yield _File(fd, prefix + entry.rel)


def _render(
    matches: list[Match], params: GrepParams, shown: str, engine: str, too_deep: int
) -> ToolResult:
    details: dict[str, Any] = {
        "engine": engine,
        "path": shown,
        "count": min(len(matches), params.limit),
    }
    deep_note = ""
    if too_deep:
        details["too_deep"] = too_deep
        deep_note = (
            f"\n\n[{too_deep} directories more than {MAX_WALK_DEPTH} levels below {shown} were "
            "not searched; search from a deeper path to reach them.]"
        )
    if not matches:
        return ToolResult.text(f"No matches for /{params.pattern}/ in {shown}.{deep_note}", details)
    over = len(matches) > params.limit
    lines = [f"{m.path}:{m.line}: {_clip(m)}" for m in matches[: params.limit]]
    cut = truncate_head("\n".join(lines), max_lines=params.limit, max_bytes=DEFAULT_MAX_BYTES)
    text = cut.content
    notes = []
    if over:
        notes.append(f"Stopped at {params.limit} matches; narrow the pattern, path or glob.")
    if cut.truncated:
        notes.append(
            f"Output cut at {format_size(DEFAULT_MAX_BYTES)}: {cut.output_lines} of "
            f"{len(lines)} matches shown."
        )
    if notes:
        details["truncated"] = True
        text += "\n\n[" + " ".join(notes) + "]"
    return ToolResult.text(text + deep_note, details)


def _clip(match: Match) -> str:
    if match.chars <= MAX_LINE_CHARS:
        return match.text
    return match.text[:MAX_LINE_CHARS] + f"… [line cut, {match.chars} characters]"


async def _search_python(
    batch: list[_File],
    source: str,
    params: GrepParams,
    wanted: int,
    deadline: float,
    timeout_s: float,
) -> list[Match]:
    """Matches from the Python worker process, killed at `deadline` or on cancellation."""
    request = {
        "pattern": source,
        "ignore_case": params.ignore_case,
        "limit": wanted,
        "max_bytes": MAX_FILE_BYTES,
        "max_chars": MAX_LINE_CHARS,
        "files": [[file.fd, index] for index, file in enumerate(batch)],
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        str(_WORKER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        pass_fds=[file.fd for file in batch],
        limit=2**20,
    )
    loop = asyncio.get_running_loop()
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(json.dumps(request).encode()), max(0.0, deadline - loop.time())
        )
    except TimeoutError:
        raise ToolError(
            "The regular expression took too long to run (stopped after "
            f"{timeout_s:g} s). It probably backtracks catastrophically (nested "
            "quantifiers like '(a+)+', or backreferences); simplify it or search a narrower path."
        ) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        message = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ToolError(f"The search failed: {message[0][:300]}")
    found = []
    for raw in out.splitlines():
        index, line, text, chars = json.loads(raw)
        found.append(Match(batch[index].path, line, text, chars))
    return found


async def _search_rg(
    rg: str, batch: list[_File], params: GrepParams, wanted: int
) -> list[Match] | None:
    """Matches from ripgrep, or None if rg cannot compile the pattern."""
    # One thread: files are searched, and reported, in the order given (the walk's order).
    # `--max-count`: no file sends more matching lines than can still be shown, so what is
    # parsed here stays bounded (a file's matches are held until rg says it was not binary).
    args = [rg, "--json", "--no-config", "--no-messages", "--threads=1", f"--max-count={wanted}"]
    if params.ignore_case:
        args.append("--ignore-case")
    if params.literal:
        args.append("--fixed-strings")
    args += ["--regexp", params.pattern, "--"]
    by_name = {f"/proc/self/fd/{file.fd}": index for index, file in enumerate(batch)}
    args += list(by_name)
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        pass_fds=[file.fd for file in batch],
        limit=2 * MAX_FILE_BYTES,  # one JSON line holds a whole matching line
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_task = asyncio.ensure_future(proc.stderr.read(64 * 1024))
    found: list[tuple[int, Match]] = []
    pending: dict[
        int, list[tuple[int, Match]]
    ] = {}  # a file's matches, kept once it proved not binary
    stopped_early = False
    try:
        async for raw in proc.stdout:
            event = json.loads(raw)
            kind = event.get("type")
            data = event.get("data", {})
            if kind == "match":
                index = by_name.get(_rg_text(data["path"]))
                if index is None:
                    continue
                line = _rg_text(data["lines"]).removesuffix("\n").removesuffix("\r")
                number = int(data["line_number"])
                match = Match(batch[index].path, number, line[:MAX_LINE_CHARS], len(line))
                pending.setdefault(index, []).append((index, match))
            elif kind == "end":
                index = by_name.get(_rg_text(data["path"]))
                matches = pending.pop(index, []) if index is not None else []
                if data.get("binary_offset") is None:  # a NUL byte makes the file binary
                    found.extend(matches)
                if len(found) >= wanted:
                    stopped_early = True
                    break
    finally:
        # Kill only a process we stopped listening to: killing one that already closed its
        # output races the child watcher for its exit status (see the module docstring).
        if stopped_early or sys.exc_info()[0] is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        stderr = await stderr_task
        code = await proc.wait()
    message = stderr.decode("utf-8", "replace")
    if not found and ("regex parse error" in message or "error parsing regex" in message):
        return None
    if code not in (0, 1) and not stopped_early and not found:
        raise ToolError(f"ripgrep failed (exit status {code}): {message.strip()[:500]}")
    found.sort(key=lambda pair: (pair[0], pair[1].line))
    return [match for _, match in found[:wanted]]


def _rg_text(value: dict[str, str]) -> str:
    if "text" in value:
        return value["text"]
    return base64.b64decode(value["bytes"]).decode("utf-8", "replace")
