"""The stdio transport for MCP servers: a child process speaking JSON-RPC lines.

Owns: starting the server in its own process group with the given environment, bounding what
it may send (one message at most `max_message_bytes`; its stderr kept as a short tail for
error messages, never copied to ours), noticing when it exits, and stopping it quickly (stdin
closed, a short grace, then the whole process group killed; the kill happens on every path,
also when the stop itself is cancelled). The server ends with Teammate even when Teammate is
SIGKILLed and can stop nothing: the kernel kills it then (`tools.parent_death`).

Why not the SDK's `stdio_client`: it buffers a line of any length (a server writing without
newlines would grow our memory without end), copies the server's stderr to our stderr, and
its stop may wait 4 s; a server is output we do not trust. The message framing and parsing
are the SDK's own (`jsonrpc_message_adapter`, `SessionMessage`), so the `mcp` client session
runs on this transport unchanged.

Why no reader or writer task (measured, `benchmarks/mcp_overhead.py`): the streams handed to
the session are not queues between tasks but the pipe itself. The session's receive loop
reads and parses the next line in its own task, and a request is written to stdin in the task
that sends it. A call so costs no task switch and no queue on our side; with a task and a
zero-buffer queue each way, the client's CPU per call was about a third higher.

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

from tools.parent_death import ends_with_parent

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 2048
STOP_GRACE_S = 0.5
INPUT_CLOSED_GRACE_S = 1.0


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
        preexec_fn=ends_with_parent(),  # (in its own session no terminal signal reaches it)
        limit=max_message_bytes,
    )
    process_info.pid = process.pid
    assert process.stdin is not None and process.stderr is not None
    stdin, stderr = process.stdin, process.stderr
    reader = LineReader(process, process_info, max_message_bytes)
    writer = LineWriter(process)

    async def keep_stderr_tail() -> None:
        with contextlib.suppress(OSError):
            while chunk := await stderr.read(4096):
                tail = process_info.stderr_tail
                tail.extend(chunk)
                del tail[: max(0, len(tail) - STDERR_TAIL_BYTES)]

    async def note_exit() -> None:
        process_info.returncode = await process.wait()
        process_info.exited.set()

    stopping = False

    async def note_input_closed() -> None:
        # A server that closed its stdin reads no request: a call would wait for its whole
        # deadline. One that exits closes it too, so only one still running a moment later
        # is stopped (its stdout then ends, and the session with it).
        with contextlib.suppress(Exception):
            await stdin.wait_closed()
        if stopping:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(INPUT_CLOSED_GRACE_S):
                await process_info.exited.wait()
                return
        process_info.failure = "it closed its input"
        _kill_group(process)

    async with anyio.create_task_group() as tasks:
        for task in (keep_stderr_tail, note_exit, note_input_closed):
            tasks.start_soon(task)
        try:
            yield reader, writer
        finally:
            stopping = True
            try:
                with anyio.CancelScope(shield=True):  # (anyio's cancels; asyncio's still land)
                    await _stop(process)
            finally:
                await reader.aclose()
                await writer.aclose()
                tasks.cancel_scope.cancel()


class LineReader:
    """The session's read stream: each `receive` reads the next line of the server's stdout
    in the caller's task (the session's one receive loop), parses it as JSON-RPC and returns
    it. No reader task, no queue: a response costs no task switch before the session sees it.
    A line that is not JSON-RPC is returned as an error item (the session logs and skips it);
    the end of stdout, or a line over the limit, ends the stream."""

    def __init__(
        self, process: asyncio.subprocess.Process, info: StdioProcess, max_message_bytes: int
    ) -> None:
        assert process.stdout is not None
        self._stdout = process.stdout
        self._process = process
        self._info = info
        self._max_message_bytes = max_message_bytes
        self._ended = False

    async def receive(self) -> SessionMessage | Exception:
        while True:
            if self._ended:
                raise anyio.EndOfStream
            try:
                line = await self._stdout.readline()
            except ValueError:  # a line over the limit (asyncio drops it)
                self._info.failure = f"it sent a message over {self._max_message_bytes // 1024} KiB"
                _kill_group(self._process)
                self._end()
                raise anyio.EndOfStream from None
            if not line:
                self._end()
                raise anyio.EndOfStream
            if not line.strip():
                continue
            try:
                message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError:
                # Not echoed: the line is the server's, and may be anything.
                return ValueError("a line that is not JSON-RPC")
            return SessionMessage(message)

    def _end(self) -> None:
        self._ended = True
        self._info.closed.set()

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended = True

    async def __aenter__(self) -> LineReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class LineWriter:
    """The session's write stream: each `send` writes one JSON line to the server's stdin in
    the sender's task (asyncio's pipe transport buffers it; `drain` waits only when the
    server reads slower than we write). A server that closed its stdin cannot be talked to:
    its process group is killed, so its stdout ends and the session sees the end."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        self._stdin = process.stdin
        self._process = process
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            self._stdin.write(data.encode() + b"\n")
            await self._stdin.drain()
        except OSError:
            self._closed = True
            _kill_group(self._process)
            raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> LineWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Close stdin (the spec's polite stop), wait briefly, then kill the process group.

    The kill is in `finally`: a stop cancelled during its grace (a start that timed out, then
    given up on by its caller: two cancels) used to skip it, and left the server running."""
    try:
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        if process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), STOP_GRACE_S)
    finally:
        _kill_group(process)  # also whatever it started, even if it exited itself
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.wait()), 2.0)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
