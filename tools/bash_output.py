"""A bash command's output: counted, its tail kept to show, the whole kept to save.

Owns: `CommandOutput` (the tail in memory for the model and for updates; the whole output in
memory while small, then in a temporary file outside the workspace, up to `MAX_SAVED_BYTES`).
Saving it into the workspace is `BashTool`'s, through the confined writer.

Must not: import anything of ours outside `tools.truncation`.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import IO

from tools.truncation import DEFAULT_MAX_BYTES, truncate_tail

MAX_SAVED_BYTES = 50 * 1024 * 1024
_MEMORY_BYTES = 1024 * 1024
_TAIL_KEEP = 2 * DEFAULT_MAX_BYTES


def _new_spill_file() -> IO[bytes]:
    return tempfile.TemporaryFile(prefix="teammate-bash-")


class CommandOutput:
    """A command's output: counted, its tail kept in memory, the whole kept for saving (in
    memory while small, then in a temporary file outside the workspace, up to a cap)."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.newlines = 0
        self.last_byte = b""
        self.tail = bytearray()
        self.memory = bytearray()
        self.spill: IO[bytes] | None = None
        self.saved = 0

    async def add(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        self.newlines += chunk.count(b"\n")
        self.last_byte = chunk[-1:]
        self.tail += chunk
        if len(self.tail) > _TAIL_KEEP:
            del self.tail[: len(self.tail) - _TAIL_KEEP]
        room = MAX_SAVED_BYTES - self.saved
        part = chunk[:room]
        if not part:
            return
        self.saved += len(part)
        if self.spill is None and len(self.memory) + len(part) <= _MEMORY_BYTES:
            self.memory += part
            return
        spill = self.spill
        if spill is None:
            spill = await asyncio.to_thread(_new_spill_file)
            self.spill = spill
            await asyncio.to_thread(spill.write, bytes(self.memory))
            self.memory.clear()
        await asyncio.to_thread(spill.write, part)

    @property
    def total_lines(self) -> int:
        return self.newlines + (1 if self.last_byte not in (b"", b"\n") else 0)

    def tail_text(self) -> tuple[str, bool]:
        """The kept tail as text (starting at a line boundary) and whether it is cut."""
        data = bytes(self.tail)
        if self.total_bytes > len(data):
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut != -1 else data
        text = data.decode("utf-8", "replace")
        result = truncate_tail(text)
        cut_off = result.truncated or self.total_bytes > len(self.tail)
        return result.content, cut_off

    def full(self) -> bytes:
        if self.spill is None:
            return bytes(self.memory)
        self.spill.seek(0)
        return self.spill.read()

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()
