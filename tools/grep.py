"""The grep tool: search file contents in the workspace with a regular expression.

Owns: `GrepTool` and its two engines, ripgrep (when `rg` is installed) and pure Python. Both
search the same files in the same order and report the same matches: every regular file under
the path (hidden ones included, .git and symlinks skipped, files containing NUL bytes treated
as binary and skipped), names sorted per directory, one result per matching line.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from tools.globs import compile_glob, walk_files
from tools.truncation import DEFAULT_MAX_BYTES, format_size, truncate_head
from tools.workspace import display_path, resolve_in_workspace, workspace_root

MAX_LINE_CHARS = 500
MAX_FILE_BYTES = 32 * 1024 * 1024

Engine = Literal["auto", "ripgrep", "python"]


@dataclass(frozen=True, slots=True)
class Match:
    path: str  # relative to the workspace
    line: int
    text: str


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

    def __init__(self, *, engine: Engine = "auto", rg_path: str | None = None) -> None:
        self.engine = engine
        self.rg_path = rg_path if rg_path is not None else shutil.which("rg")

    def summarize(self, params: GrepParams) -> str:
        where = "" if params.path in (".", "") else f" in {params.path}"
        return f"Grep /{params.pattern}/{where}"

    async def execute(self, call_id: str, params: GrepParams, ctx: ToolContext) -> ToolResult:
        root = workspace_root(ctx.workspace)
        target = resolve_in_workspace(ctx.workspace, params.path)
        shown = display_path(root, target)
        kind = await asyncio.to_thread(_kind, target)
        if kind is None:
            raise ToolError(f"Path not found: '{shown}'.")
        if kind == "other":
            raise ToolError(f"'{shown}' is not a regular file or directory.")
        source = re.escape(params.pattern) if params.literal else params.pattern
        try:
            regex = re.compile(source, re.IGNORECASE if params.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"Invalid regular expression: {exc}.") from None
        engine = self.engine
        if engine == "auto":
            engine = "ripgrep" if self.rg_path else "python"
        matches: list[Match] | None = None
        if engine == "ripgrep":
            if not self.rg_path:
                raise ToolError("ripgrep (rg) is not installed.")
            matches = await _search_rg(self.rg_path, root, target, kind == "dir", params)
            if matches is None:
                engine = "python"  # rg rejected a pattern Python accepts (e.g. a lookaround)
        if matches is None:
            matches = await asyncio.to_thread(_search_python, root, target, regex, params)
        return _render(matches, params, shown, engine)


def _render(matches: list[Match], params: GrepParams, shown: str, engine: str) -> ToolResult:
    details: dict[str, Any] = {
        "engine": engine,
        "path": shown,
        "count": min(len(matches), params.limit),
    }
    if not matches:
        return ToolResult.text(f"No matches for /{params.pattern}/ in {shown}.", details)
    over = len(matches) > params.limit
    lines = [f"{m.path}:{m.line}: {_clip(m.text)}" for m in matches[: params.limit]]
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
    return ToolResult.text(text, details)


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[:MAX_LINE_CHARS] + f"… [line cut, {len(text)} characters]"


def _search_python(
    root: Path, target: Path, regex: re.Pattern[str], params: GrepParams
) -> list[Match]:
    wanted = compile_glob(params.glob) if params.glob else None
    is_dir = target.is_dir()
    files = walk_files(target) if is_dir else [target]
    found: list[Match] = []
    for file in files:
        if wanted is not None and is_dir and not wanted(file.relative_to(target).as_posix()):
            continue
        try:
            info = file.lstat()
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                continue
            data = file.read_bytes()
        except OSError:
            continue
        if b"\x00" in data:
            continue
        rel = file.relative_to(root).as_posix()
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if regex.search(line):
                found.append(Match(rel, number, line))
                if len(found) > params.limit:
                    return found
    return found


async def _search_rg(
    rg: str, root: Path, target: Path, is_dir: bool, params: GrepParams
) -> list[Match] | None:
    """Matches from ripgrep, or None if rg cannot compile the pattern."""
    args = [
        rg,
        "--json",
        "--sort=path",
        "--hidden",
        "--no-ignore",
        "--no-config",
        "--no-messages",
        f"--max-filesize={MAX_FILE_BYTES}",
        "--glob=!.git",
    ]
    if params.ignore_case:
        args.append("--ignore-case")
    if params.literal:
        args.append("--fixed-strings")
    if params.glob and is_dir:
        args.append(f"--glob={params.glob}")
    args += ["--regexp", params.pattern, "--", str(target)]
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=2 * MAX_FILE_BYTES,  # one JSON line holds a whole matching line
    )
    found: list[Match] = []
    assert proc.stdout is not None and proc.stderr is not None
    try:
        async for raw in proc.stdout:
            event = json.loads(raw)
            if event.get("type") != "match":
                continue
            data = event["data"]
            path = Path(_rg_text(data["path"]))
            line = _rg_text(data["lines"]).removesuffix("\n").removesuffix("\r")
            found.append(Match(path.relative_to(root).as_posix(), int(data["line_number"]), line))
            if len(found) > params.limit:
                break
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        stderr = await proc.stderr.read()
        code = await proc.wait()
    if code == 2 and not found:
        message = stderr.decode("utf-8", "replace")
        if "regex" in message.lower():
            return None
        raise ToolError(f"ripgrep failed: {message.strip()[:500]}")
    return found


def _kind(path: Path) -> Literal["file", "dir", "other"] | None:
    try:
        mode = path.lstat().st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _rg_text(value: dict[str, str]) -> str:
    if "text" in value:
        return value["text"]
    return base64.b64decode(value["bytes"]).decode("utf-8", "replace")
