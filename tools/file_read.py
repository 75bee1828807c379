"""The read tool: a workspace file as text (a window of lines, head-truncated) or an image.

Owns: `ReadTool`, its parameters and size limits (`MAX_FILE_BYTES`, `MAX_IMAGE_FILE_BYTES`,
`MAX_IMAGE_PIXELS`), and how a read is bounded and worded: only the window shown is split into
lines (counting is done with C-speed passes over the text, never a Python step per line), the
output is head-truncated (tools.truncation) with a notice telling the model how to continue,
and images are refused by their header's pixel count before anything is decoded
(`tools.content.fit_image`). The file is opened through `tools.workspace`, in a worker thread.
Re-exported by `tools.files` with the other file tools.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core.messages import Image, Text
from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from tools.content import ImageError, decode_text, fit_image, sniff_image
from tools.truncation import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    clip_utf8,
    format_size,
    split_lines,
    truncate_head,
)
from tools.workspace import Root, read_file

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_IMAGE_FILE_BYTES = 32 * 1024 * 1024
MAX_IMAGE_PIXELS = 25_000_000  # ~100 MB decoded (RGBA); a bigger one is refused unread


class ReadParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path of the file, relative to the workspace.")
    offset: int | None = Field(
        default=None, ge=1, description="Line number to start reading from (1 = first line)."
    )
    limit: int | None = Field(default=None, ge=1, description="Maximum number of lines to read.")


class ReadTool(AgentTool[ReadParams]):
    name: ClassVar[str] = "read"
    label: ClassVar[str] = "Read"
    description: ClassVar[str] = (
        "Read a file from the workspace. Text files are returned as they are (no line numbers), "
        f"at most {DEFAULT_MAX_LINES} lines or {DEFAULT_MAX_BYTES // 1024} KB per call, "
        "whichever comes first; when more remains, a notice at the end gives the `offset` to "
        "continue from. Use `offset` (1-indexed line) and `limit` to read part of a long file. "
        "Images (PNG, JPEG, GIF, WebP, BMP, TIFF, recognised by content) are returned as images, "
        "scaled to fit 2000×2000. Other binary files are refused."
    )
    parameters: ClassVar[type[BaseModel]] = ReadParams

    def summarize(self, params: ReadParams) -> str:
        if params.offset is None and params.limit is None:
            return f"Read {params.path}"
        start = params.offset or 1
        end = "" if params.limit is None else str(start + params.limit - 1)
        return f"Read {params.path}:{start}-{end}"

    async def execute(self, call_id: str, params: ReadParams, ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(_read, ctx, params)


def _read(ctx: ToolContext, params: ReadParams) -> ToolResult:
    with Root(ctx.workspace) as root:
        data, shown = read_file(root, params.path, max_bytes=MAX_FILE_BYTES)
    if sniff_image(data[:16]) is not None:
        return _read_image(data, shown)
    decoded = decode_text(data)
    if decoded is None:
        raise ToolError(
            f"'{shown}' is a binary file ({format_size(len(data))}) and cannot be shown as text."
        )
    return _read_text(decoded[0], shown, params.offset, params.limit, encoding=decoded[1])


def _read_image(data: bytes, shown: str) -> ToolResult:
    if len(data) > MAX_IMAGE_FILE_BYTES:
        raise ToolError(f"'{shown}' is an image too large to read ({format_size(len(data))}).")
    try:
        image = fit_image(data, max_pixels=MAX_IMAGE_PIXELS)
    except ImageError as exc:
        raise ToolError(f"'{shown}' looks like an image but {exc}.") from None
    w, h = image.original_size
    note = f"Image {shown} ({w}×{h}, {image.mime_type})"
    if image.resized:
        note += f", scaled to {image.size[0]}×{image.size[1]}"
    return ToolResult(
        content=[Text(text=note + "."), Image(data=image.data_b64, mime_type=image.mime_type)],
        details={
            "path": shown,
            "kind": "image",
            "mime_type": image.mime_type,
            "original_size": list(image.original_size),
            "size": list(image.size),
        },
    )


_BISECT_CHARS = 4096  # below this, a line start is found by scanning


def _count_lines(text: str) -> int:
    """As many as `split_lines(text)` would give, without building the list."""
    if not text:
        return 0
    newlines = text.count("\n")
    return newlines if text.endswith("\n") else newlines + 1


def _line_start(text: str, pos: int, lines: int) -> int:
    """Where the line `lines` lines after the one starting at `pos` starts (len(text) when the
    text ends first). Counting is done by `str.count` over halves: a few C-speed passes, never
    a Python step per line (a file of 60 MB of newlines has 60 million of them)."""
    hi = len(text)
    if lines <= 0:
        return pos
    if text.count("\n", pos, hi) < lines:
        return hi
    lo = pos  # the line sought starts after the `lines`-th newline in [lo, hi)
    while hi - lo > _BISECT_CHARS:
        mid = (lo + hi) // 2
        before = text.count("\n", lo, mid)
        if before >= lines:
            hi = mid
        else:
            lines -= before
            lo = mid
    while lines:
        lo = text.index("\n", lo) + 1
        lines -= 1
    return lo


def _read_text(
    text: str, shown: str, offset: int | None, limit: int | None, *, encoding: str
) -> ToolResult:
    # Only the window shown is split into lines: memory follows the file's size, not its line
    # count, and a read far into a big file costs a few counting passes.
    total = _count_lines(text)
    start = (offset or 1) - 1
    details: dict[str, Any] = {"path": shown, "kind": "text", "encoding": encoding}
    if total == 0:
        details.update(total_lines=0)
        return ToolResult.text(f"({shown} is empty.)", details)
    if start >= total:
        raise ToolError(f"offset {start + 1} is past the end of {shown}, which has {total} lines.")
    end = total if limit is None else min(total, start + limit)
    begin = _line_start(text, 0, start)
    # One line more than a read shows at most, so truncation is judged as on the whole file.
    stop = _line_start(text, begin, min(end - start, DEFAULT_MAX_LINES + 1))
    selected = split_lines(text[begin:stop])
    joined = "\n".join(selected)
    if selected and not selected[-1]:
        joined += "\n"  # else an empty last line is lost to the join, and with it the notice
    cut = truncate_head(joined)
    details.update(total_lines=total)
    if cut.first_line_too_long:
        # One line over the byte limit: show its start rather than nothing, so the model still
        # learns what the file holds; grep can search the rest of the line.
        line_no = start + 1
        size = format_size(len(selected[0].encode("utf-8", "surrogatepass")))
        body = clip_utf8(selected[0], DEFAULT_MAX_BYTES)
        after = (
            f"Continue with offset={line_no + 1}."
            if line_no < total
            else "That is the end of the file."
        )
        notice = (
            f"[Line {line_no} is {size}, over the {format_size(DEFAULT_MAX_BYTES)} limit of one "
            f"read; only its first {format_size(DEFAULT_MAX_BYTES)} is shown. Use grep to search "
            f"inside it. {after}]"
        )
        details.update(lines=[line_no, line_no], truncated=True, clipped_line=True)
        return ToolResult.text(f"{body}\n\n{notice}", details)
    shown_first = start + 1
    shown_last = start + cut.output_lines
    details.update(lines=[shown_first, shown_last], truncated=cut.truncated)
    if cut.truncated:
        reason = (
            f"{DEFAULT_MAX_LINES}-line limit"
            if cut.truncated_by == "lines"
            else f"{format_size(DEFAULT_MAX_BYTES)} limit"
        )
        notice = (
            f"[Showing lines {shown_first}-{shown_last} of {total} ({reason}). "
            f"Use offset={shown_last + 1} to continue.]"
        )
        return ToolResult.text(f"{cut.content}\n\n{notice}", details)
    if end < total:
        notice = (
            f"[Showing lines {shown_first}-{shown_last} of {total}. "
            f"Use offset={shown_last + 1} to continue.]"
        )
        return ToolResult.text(f"{cut.content}\n\n{notice}", details)
    return ToolResult.text(cut.content, details)
