"""The workspace file tools: read, write, edit, ls and find.

Owns: write, edit, ls and find, their parameters, their size limits and how their output is
bounded and worded; read is `tools.file_read`'s and is re-exported here, so the five tools are
imported from this module.

Every path goes through the confined, descriptor-based operations of `tools.workspace` (no
path is reopened by name); all file IO and CPU work (decoding, counting matches, building the
diff, decoding images) runs in a worker thread so the event loop never blocks. That work is
bounded first: content to write or edit is capped (`MAX_WRITE_BYTES`, `MAX_EDIT_FILE_BYTES`),
match counting stops early, the diff covers only the changed lines, and images are refused by
their header's pixel count before anything is decoded (`MAX_IMAGE_PIXELS`), a few at a time
(`tools.content.fit_image`). Reads are head-truncated (tools.truncation) with a notice telling
the model how to continue.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core.tools import AgentTool, ExecutionMode, ToolContext, ToolError, ToolResult
from tools.content import decode_text
from tools.file_read import (
    MAX_FILE_BYTES,
    MAX_IMAGE_FILE_BYTES,
    MAX_IMAGE_PIXELS,
    ReadParams,
    ReadTool,
    _read,
)
from tools.globs import compile_glob
from tools.truncation import format_size
from tools.workspace import (
    MAX_WALK_DEPTH,
    Root,
    WalkStats,
    open_dir,
    open_file,
    read_fd,
    replace_file,
    walk_tree,
)

__all__ = [
    "DIFF_CONTEXT_LINES",
    "MAX_COUNTED_MATCHES",
    "MAX_EDIT_FILE_BYTES",
    "MAX_FILE_BYTES",
    "MAX_IMAGE_FILE_BYTES",
    "MAX_IMAGE_PIXELS",
    "MAX_WRITE_BYTES",
    "EditParams",
    "EditTool",
    "FindParams",
    "FindTool",
    "LsParams",
    "LsTool",
    "ReadParams",
    "ReadTool",
    "WriteParams",
    "WriteTool",
    "_read",
]

MAX_WRITE_BYTES = 16 * 1024 * 1024
MAX_EDIT_FILE_BYTES = 16 * 1024 * 1024
MAX_COUNTED_MATCHES = 1000
DIFF_CONTEXT_LINES = 3


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- write ---------------------------------------------------------------------------------


class WriteParams(_Params):
    path: str = Field(description="Path of the file, relative to the workspace.")
    content: str = Field(description="The complete new content of the file.")


class WriteTool(AgentTool[WriteParams]):
    name: ClassVar[str] = "write"
    label: ClassVar[str] = "Write"
    description: ClassVar[str] = (
        "Write a text file in the workspace (UTF-8), replacing it entirely if it exists. Missing "
        "parent directories are created. To change part of an existing file, prefer `edit`."
    )
    parameters: ClassVar[type[BaseModel]] = WriteParams
    execution_mode: ClassVar[ExecutionMode] = "sequential"

    def summarize(self, params: WriteParams) -> str:
        return f"Write {params.path}"

    async def execute(self, call_id: str, params: WriteParams, ctx: ToolContext) -> ToolResult:
        if len(params.content) > MAX_WRITE_BYTES:  # characters: a cheap first bound
            raise _too_big_to_write(len(params.content))
        return await asyncio.to_thread(_write, ctx, params)


def _too_big_to_write(size: int) -> ToolError:
    return ToolError(
        f"The content is too large to write ({format_size(size)}); at most "
        f"{format_size(MAX_WRITE_BYTES)} per file. Write it in smaller files."
    )


def _write(ctx: ToolContext, params: WriteParams) -> ToolResult:
    data = params.content.encode("utf-8", "surrogatepass")
    if len(data) > MAX_WRITE_BYTES:
        raise _too_big_to_write(len(data))
    with Root(ctx.workspace) as root:
        created, shown = replace_file(root, params.path, data)
    verb = "Created" if created else "Overwrote"
    return ToolResult.text(
        f"{verb} {shown}: wrote {len(data)} bytes.",
        {"path": shown, "bytes": len(data), "created": created},
    )


# -- edit ----------------------------------------------------------------------------------


class EditParams(_Params):
    path: str = Field(description="Path of the file, relative to the workspace.")
    old_text: str = Field(
        description="Exact text to replace, including whitespace and indentation. It must occur "
        "exactly once in the file; include surrounding lines to make it unique."
    )
    new_text: str = Field(description="The text to put in its place.")


class EditTool(AgentTool[EditParams]):
    name: ClassVar[str] = "edit"
    label: ClassVar[str] = "Edit"
    description: ClassVar[str] = (
        "Replace one exact piece of text in a workspace file. `old_text` must match the file "
        "exactly (whitespace and indentation included) and occur exactly once, otherwise nothing "
        "changes and the error says how many matches there were. Line endings (LF or CRLF) and "
        "the file's encoding are kept. Read the file first if unsure of its current content."
    )
    parameters: ClassVar[type[BaseModel]] = EditParams
    execution_mode: ClassVar[ExecutionMode] = "sequential"

    def summarize(self, params: EditParams) -> str:
        return f"Edit {params.path}"

    async def execute(self, call_id: str, params: EditParams, ctx: ToolContext) -> ToolResult:
        if not params.old_text:
            raise ToolError("old_text is empty; give the exact text to replace.")
        if params.old_text == params.new_text:
            raise ToolError("old_text and new_text are identical; there is nothing to change.")
        if len(params.old_text) + len(params.new_text) > MAX_WRITE_BYTES:
            raise ToolError(
                f"old_text and new_text together are too large (at most "
                f"{format_size(MAX_WRITE_BYTES)}); replace the file with `write` instead."
            )
        return await asyncio.to_thread(_edit, ctx, params)


def _edit(ctx: ToolContext, params: EditParams) -> ToolResult:
    with Root(ctx.workspace) as root:
        fd, shown = open_file(root, params.path)
        size = os.fstat(fd).st_size
        if size > MAX_EDIT_FILE_BYTES:  # refused by its size: a refusal reads nothing
            os.close(fd)
            raise ToolError(
                f"'{shown}' is too large to edit ({format_size(size)}; at most "
                f"{format_size(MAX_EDIT_FILE_BYTES)})."
            )
        data = read_fd(fd, shown, max_bytes=MAX_EDIT_FILE_BYTES)  # refuses one that grew
        decoded = decode_text(data)
        if decoded is None:
            raise ToolError(f"'{shown}' is a binary file and cannot be edited as text.")
        text, encoding = decoded
        crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
        old, new = params.old_text, params.new_text
        if crlf:
            old = old.replace("\r\n", "\n").replace("\n", "\r\n")
            new = new.replace("\r\n", "\n").replace("\n", "\r\n")
        count = _count_overlapping(text, old, stop_after=MAX_COUNTED_MATCHES)
        if count == 0:
            raise ToolError(
                f"old_text was not found in {shown}. It must match exactly, including whitespace "
                "and indentation; read the file to see its current content."
            )
        if count > 1:
            times = (
                f"{count}" if count <= MAX_COUNTED_MATCHES else f"more than {MAX_COUNTED_MATCHES}"
            )
            raise ToolError(
                f"old_text occurs {times} times in {shown}; it must occur exactly once. Include "
                "more surrounding text to make it unique."
            )
        at = text.index(old)
        updated = text[:at] + new + text[at + len(old) :]
        try:
            encoded = updated.encode(
                encoding, "surrogatepass" if encoding != "latin-1" else "strict"
            )
        except UnicodeEncodeError:
            raise ToolError(
                f"new_text contains characters that {shown}'s encoding ({encoding}) cannot hold."
            ) from None
        replace_file(root, shown, encoded, create_parents=False)
    first_line = text.count("\n", 0, at) + 1
    diff = _local_diff(text, at, old, new, shown)
    return ToolResult.text(
        f"Edited {shown}: replaced 1 occurrence at line {first_line}.",
        {
            "path": shown,
            "diff": diff,
            "first_changed_line": first_line,
            "line_endings": "crlf" if crlf else "lf",
            "encoding": encoding,
        },
    )


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _local_diff(text: str, at: int, old: str, new: str, shown: str) -> str:
    """The unified diff of one replacement, computed on the changed lines and a few lines of
    context only (a diff of the whole file costs gigabytes on a big one)."""
    start = at
    for _ in range(DIFF_CONTEXT_LINES + 1):
        start = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
    end = at + len(old)
    for _ in range(DIFF_CONTEXT_LINES + 1):
        nl = text.find("\n", end)
        end = len(text) if nl == -1 else nl + 1
    before = text[start:end]
    after = text[start:at] + new + text[at + len(old) : end]
    offset = text.count("\n", 0, start)
    lines = difflib.unified_diff(
        before.replace("\r\n", "\n").splitlines(keepends=True),
        after.replace("\r\n", "\n").splitlines(keepends=True),
        fromfile=f"a/{shown}",
        tofile=f"b/{shown}",
        n=DIFF_CONTEXT_LINES,
    )
    out = []
    for line in lines:
        hunk = _HUNK.match(line)
        if hunk:
            a, b = int(hunk[1]) + offset, int(hunk[3]) + offset
            line = f"@@ -{a}{hunk[2] or ''} +{b}{hunk[4] or ''} @@" + line[hunk.end() :]
        out.append(line)
    return "".join(out)


def _count_overlapping(text: str, needle: str, *, stop_after: int) -> int:
    """Occurrences of `needle` (overlapping ones too), counting no further than
    `stop_after` + 1."""
    count, at = 0, text.find(needle)
    while at != -1 and count <= stop_after:
        count += 1
        at = text.find(needle, at + 1)
    return count


# -- ls ------------------------------------------------------------------------------------


class LsParams(_Params):
    path: str = Field(default=".", description="Directory to list, relative to the workspace.")
    limit: int = Field(default=500, ge=1, le=5000, description="Maximum number of entries.")


class LsTool(AgentTool[LsParams]):
    name: ClassVar[str] = "ls"
    label: ClassVar[str] = "List"
    description: ClassVar[str] = (
        "List a directory of the workspace (hidden entries included), sorted by name. "
        "Directories end with '/', symbolic links with '@'. At most `limit` entries (default "
        "500); use `find` to search a tree."
    )
    parameters: ClassVar[type[BaseModel]] = LsParams

    def summarize(self, params: LsParams) -> str:
        return f"List {params.path}"

    async def execute(self, call_id: str, params: LsParams, ctx: ToolContext) -> ToolResult:
        entries, shown = await asyncio.to_thread(_list_dir, ctx, params.path)
        details: dict[str, Any] = {"path": shown, "total": len(entries)}
        if not entries:
            return ToolResult.text(f"({shown} is empty.)", details)
        kept = entries[: params.limit]
        text = "\n".join(kept)
        if len(entries) > len(kept):
            text += (
                f"\n\n[Showing {len(kept)} of {len(entries)} entries. Raise `limit`, or use "
                "`find` with a pattern.]"
            )
            details["truncated"] = True
        return ToolResult.text(text, details)


def _list_dir(ctx: ToolContext, raw: str) -> tuple[list[str], str]:
    with Root(ctx.workspace) as root:
        fd, shown = open_dir(root, raw)
    names: list[str] = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                try:
                    if entry.is_symlink():
                        names.append(entry.name + "@")
                    elif entry.is_dir(follow_symlinks=False):
                        names.append(entry.name + "/")
                    else:
                        names.append(entry.name)
                except OSError:
                    names.append(entry.name)
    except OSError as exc:
        raise ToolError(f"Cannot list '{shown}': {exc.strerror}.") from None
    finally:
        os.close(fd)
    names.sort(key=lambda n: (n.casefold(), n))
    return names, shown


# -- find ----------------------------------------------------------------------------------


class FindParams(_Params):
    pattern: str = Field(
        description="Glob pattern. Without '/' it matches names at any depth ('*.py'); with '/' "
        "it matches the path under `path` ('src/**/test_*.py'). Supports *, ?, **, [abc], {a,b}."
    )
    path: str = Field(default=".", description="Directory to search, relative to the workspace.")
    limit: int = Field(default=1000, ge=1, le=10000, description="Maximum number of results.")


class FindTool(AgentTool[FindParams]):
    name: ClassVar[str] = "find"
    label: ClassVar[str] = "Find"
    description: ClassVar[str] = (
        "Find files and directories in the workspace whose names match a glob pattern. Returns "
        "paths relative to the workspace, sorted, directories ending with '/'. Symbolic links "
        "are not followed and .git is skipped. At most `limit` results (default 1000)."
    )
    parameters: ClassVar[type[BaseModel]] = FindParams

    def summarize(self, params: FindParams) -> str:
        where = "" if params.path in (".", "") else f" in {params.path}"
        return f"Find {params.pattern}{where}"

    async def execute(self, call_id: str, params: FindParams, ctx: ToolContext) -> ToolResult:
        matches, more, shown, too_deep = await asyncio.to_thread(_find, ctx, params)
        details: dict[str, Any] = {"path": shown, "pattern": params.pattern, "count": len(matches)}
        note = ""
        if too_deep:
            details["too_deep"] = too_deep
            note = (
                f"\n\n[{too_deep} directories more than {MAX_WALK_DEPTH} levels below {shown} "
                "were not searched; search from a deeper path to reach them.]"
            )
        if not matches:
            return ToolResult.text(f"No files match '{params.pattern}' in {shown}.{note}", details)
        text = "\n".join(matches) + note
        if more:
            details["truncated"] = True
            text += (
                f"\n\n[Stopped at {params.limit} results. Use a narrower pattern or path, or "
                "raise `limit`.]"
            )
        return ToolResult.text(text, details)


def _find(ctx: ToolContext, params: FindParams) -> tuple[list[str], bool, str, int]:
    matches = compile_glob(params.pattern)
    with Root(ctx.workspace) as root:
        top, shown = open_dir(root, params.path)
    prefix = "" if shown == "." else shown + "/"
    found: list[str] = []
    stats = WalkStats()
    try:
        for entry in walk_tree(top, include_dirs=True, stats=stats):
            if not matches(entry.rel):
                continue
            if len(found) >= params.limit:
                return found, True, shown, stats.too_deep
            found.append(prefix + entry.rel + ("/" if entry.is_dir else ""))
    finally:
        os.close(top)
    return found, False, shown, stats.too_deep
