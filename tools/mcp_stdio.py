"""The stdio transport for MCP servers: a child process speaking JSON-RPC lines.

Owns: starting the server in its own process group with the given environment, bounding what
it may send (one message at most `max_message_bytes`; its stderr kept as a short tail for
error messages, never copied to ours), noticing when it exits, and stopping it quickly (stdin
closed, a short grace, then the whole process group killed).

Why not the SDK's `stdio_client`: it buffers a line of any length (a server writing without
newlines would grow our memory without end), copies the server's stderr to our stderr, and
its stop may wait 4 s; a server is output we do not trust. The message framing and parsing
are the SDK's own (`jsonrpc_message_adapter`, `SessionMessage`), so the `mcp` client session
runs on this transport unchanged.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import mcp_types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 2048
STOP_GRACE_S = 0.5


@dataclass(slots=True)
class StdioProcess:
    """What the connection knows about its server process, for status and error messages."""

    pid: int | None = None
    returncode: int | None = None
    # Why the connection was ended from our side (a message over the size limit).
    failure: str | None = None
    stderr_tail: bytearray = field(default_factory=bytearray)
    # Set once the server's stdout ended: it exited or closed it; nothing more will arrive.
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    def last_stderr_line(self, limit: int = 300) -> str:
        text = self.stderr_tail.decode("utf-8", "replace").strip()
        line = text.splitlines()[-1] if text else ""
        return line[-limit:]


@contextlib.asynccontextmanager
async def stdio_transport(
    command: list[str],
    *,
    env: dict[str, str],
    cwd: str | None,
    process_info: StdioProcess,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> AsyncIterator[TransportStreams]:
    """Start `command` and yield the session's (read, write) streams; stop it on exit."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own process group: everything it starts dies with it
        limit=max_message_bytes,
    )
    process_info.pid = process.pid
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr

    async def read_messages() -> None:
        try:
            async with read_writer:
                while True:
                    try:
                        line = await stdout.readline()
                    except ValueError:  # a line over the limit (asyncio drops it)
                        process_info.failure = (
                            f"it sent a message over {max_message_bytes // 1024} KiB"
                        )
                        _kill_group(process)
                        return
                    if not line:
                        return
                    if not line.strip():
                        continue
                    try:
                        message = mcp_types.jsonrpc_message_adapter.validate_json(
                            line, by_name=False
                        )
                    except ValueError:
                        # Not echoed: the line is the server's, and may be anything.
                        await read_writer.send(ValueError("a line that is not JSON-RPC"))
                        continue
                    await read_writer.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            process_info.closed.set()

    async def write_messages() -> None:
        try:
            async with write_reader:
                async for outgoing in write_reader:
                    data = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await read_writer.aclose()  # the session sees the end instead of waiting forever

    async def keep_stderr_tail() -> None:
        with contextlib.suppress(OSError):
            while chunk := await stderr.read(4096):
                tail = process_info.stderr_tail
                tail.extend(chunk)
                del tail[: max(0, len(tail) - STDERR_TAIL_BYTES)]

    async def note_exit() -> None:
        process_info.returncode = await process.wait()
        process_info.exited.set()

    async with anyio.create_task_group() as tasks:
        for task in (read_messages, write_messages, keep_stderr_tail, note_exit):
            tasks.start_soon(task)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tasks.cancel_scope.cancel()


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Close stdin (the spec's polite stop), wait briefly, then kill the process group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), STOP_GRACE_S)
    _kill_group(process)  # also whatever it started, even if it exited itself
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.wait()), 2.0)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
