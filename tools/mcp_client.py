"""One MCP server as Teammate uses it: started on first need, reused, restarted after a crash.

Owns: `McpServer`, the connection to one configured server through the official `mcp` SDK
(`mcp.Client` over our bounded stdio transport, or the SDK's streamable-HTTP transport with
the configured headers); listing its tools (bounded in number, pages and size); calling a tool
with a deadline, observing the run's cancel signal; and the lifecycle.

Lifecycle: the connection lives in one background task (the SDK's context managers must be
entered and left in the same task), so a caller that times out or is cancelled never tears a
half-made connection down. `start_soon()` starts it if it is not running; a crash (stdout
closed, a call answered "connection closed") ends the task and the next need starts a new one.
A start that fails waits before the next attempt: nothing for the first, then 1, 2, 4 … up to
60 s; meanwhile calls fail at once saying why and when it is tried again. A successful start
resets the count.

A server's `notifications/tools/list_changed` makes the connection list its tools again (and
tell `on_listed`, so runs that start afterwards get them). Bounded: one list at a time, after
a short pause that gathers a burst of notices into one list, and at most one list a second
however often a server announces changes. A list that fails keeps the last one.

Every text that came from the server or its process is bounded and has the values of the
configured secret variables replaced before it reaches a log, an error or the model.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core.tools import CancelSignal
from tools.mcp_config import McpConfigError, McpServerConfig, resolve_env, resolve_headers
from tools.mcp_http import ResponseTooLarge, bounded_http_client
from tools.mcp_stdio import StdioProcess, stdio_transport

log = logging.getLogger(__name__)

MAX_TOOLS_PER_SERVER = 128
MAX_LIST_PAGES = 10
MAX_BACKOFF_S = 60.0
MAX_ERROR_CHARS = 500
HTTP_READ_TIMEOUT_S = 300.0  # an SSE stream may stay open; each call has its own deadline
RELIST_DEBOUNCE_S = 0.2  # a server adding several tools announces each: one list for all
RELIST_MIN_INTERVAL_S = 1.0  # a server announcing changes without end is listed once a second

State = Literal["idle", "starting", "ready", "down", "closed"]


class McpUnavailable(Exception):
    """The server cannot be used now (not started, crashed, timed out); the text says why."""


class McpCallFailed(Exception):
    """A call failed for a reason the model should read (the server refused it, crashed
    during it, or did not answer in time)."""


@dataclass(frozen=True, slots=True)
class Redactor:
    secrets: tuple[str, ...]

    def __call__(self, text: str, limit: int = MAX_ERROR_CHARS) -> str:
        """One bounded line for an error or a log."""
        text = " ".join(self.scrub(text).split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def scrub(self, text: str) -> str:
        """`text` with every secret value replaced, otherwise unchanged."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def backoff_s(failures: int) -> float:
    """The wait before the next start after `failures` failed starts in a row."""
    if failures <= 1:
        return 0.0
    return min(MAX_BACKOFF_S, 2.0 ** (failures - 2))


class McpServer:
    """One configured server; see the module docstring for its lifecycle."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        environ: Mapping[str, str],
        on_listed: Callable[[McpServer, list[mcp_types.Tool]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self._environ = environ
        self._on_listed = on_listed
        self._clock = clock
        self.redact = Redactor(tuple(_secret_values(config, environ)))
        self.state: State = "idle"
        self.last_error: str | None = None
        self.listed: list[mcp_types.Tool] | None = None
        self.starts = 0  # connections made, for status and tests
        self.relists = 0  # lists made after the server announced a change, for tests
        self._failures = 0
        self._next_start_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self._ready = asyncio.Event()  # set when connected or when the attempt ended
        self._stop = asyncio.Event()
        self._process: StdioProcess | None = None
        self._tools_changed = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------

    def start_soon(self) -> None:
        """Start the connection in the background unless it runs or must wait (backoff)."""
        if self.state in ("starting", "ready", "closed"):
            return
        if self._clock() < self._next_start_at:
            return
        self.state = "starting"
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._connection(), name=f"mcp-{self.name}")

    async def wait_ready(self, timeout_s: float) -> bool:
        """Start if needed and wait up to `timeout_s` for the connection; True when ready."""
        self.start_soon()
        if self.state == "starting":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
        return self.state == "ready"

    async def aclose(self) -> None:
        """Stop the server: a ready one through its transport's polite stop, one still
        starting at once (its handshake is not waited for)."""
        was = self.state
        self.state = "closed"
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if was == "starting":
            task.cancel()
        await asyncio.wait([task], timeout=5.0)
        if not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=5.0)

    async def _connection(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack),
                    mode=self.config.protocol,
                    cache=None,
                    client_info=mcp_types.Implementation(name="teammate", version="0.1"),
                    message_handler=self._on_message,
                )
                async with asyncio.timeout(self.config.start_timeout_s):
                    await stack.enter_async_context(client)
                    listed = await self._list_tools(client)
                self.listed = listed
                self._client = client
                self.state = "ready"
                self.starts += 1
                self._failures = 0
                self.last_error = None
                self._ready.set()
                log.info("MCP server %s ready: %d tools", self.name, len(listed))
                if self._on_listed is not None:
                    self._on_listed(self, listed)
                self._tools_changed.clear()  # what it announced while starting is listed
                relisting = asyncio.create_task(self._relist_on_change(client))
                try:
                    await self._until_stopped()
                finally:
                    relisting.cancel()
                    await asyncio.wait([relisting])
                if not self.closed:
                    self._crashed(self._exit_reason("it stopped"))
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._crashed(f"it did not start within {self.config.start_timeout_s:g} s")
        except McpConfigError as exc:
            self._crashed(str(exc))
        except BaseException as exc:  # the SDK raises exception groups from its task groups
            if not isinstance(exc, Exception):
                raise
            self._crashed(self._exit_reason(_describe(exc)))
        finally:
            self._client = None
            self._ready.set()

    async def _transport(self, stack: AsyncExitStack) -> Any:
        if self.config.command is not None:
            self._process = StdioProcess()
            env = get_default_environment() | resolve_env(self.config, self._environ)
            return stdio_transport(
                self.config.command,
                env=env,
                cwd=self.config.cwd,
                process_info=self._process,
            )
        assert self.config.url is not None
        headers = resolve_headers(self.config, self._environ)
        timeout = httpx2.Timeout(self.config.start_timeout_s, read=HTTP_READ_TIMEOUT_S)
        http = await stack.enter_async_context(bounded_http_client(headers, timeout))
        return streamable_http_client(self.config.url, http_client=http)

    async def _until_stopped(self) -> None:
        waits = [asyncio.ensure_future(self._stop.wait())]
        if self._process is not None:
            waits.append(asyncio.ensure_future(self._process.closed.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if self._process is not None and self._process.closed.is_set():
                # Its output ended: give it a moment to exit, so the reason has the status.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._process.exited.wait()
        finally:
            for waiting in waits:
                waiting.cancel()

    @property
    def pid(self) -> int | None:
        """The stdio server's process id while it runs (None for HTTP or when not running)."""
        process = self._process
        if process is None or self.state != "ready":
            return None
        return process.pid

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    def _crashed(self, reason: str) -> None:
        if self.closed:
            return
        self._failures += 1
        delay = backoff_s(self._failures)
        self._next_start_at = self._clock() + delay
        self.state = "down"
        self.last_error = self.redact(reason)
        log.warning("MCP server %s is down: %s", self.name, self.last_error)

    def _exit_reason(self, fallback: str) -> str:
        process = self._process
        if process is None:
            return fallback
        if process.failure:
            return process.failure
        parts = []
        if process.returncode is not None:
            parts.append(f"it exited with status {process.returncode}")
        line = process.last_stderr_line()
        if line:
            parts.append(f"last stderr line: {line}")
        return "; ".join(parts) or fallback

    async def _on_message(self, message: mcp_types.ServerNotification | Exception) -> None:
        # Called by the session for each notification: note it, never wait here.
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed.set()

    async def _relist_on_change(self, client: Client) -> None:
        """List the tools again each time the server says they changed (see the module)."""
        while True:
            await self._tools_changed.wait()
            await asyncio.sleep(RELIST_DEBOUNCE_S)
            self._tools_changed.clear()
            try:
                async with asyncio.timeout(self.config.call_timeout_s):
                    listed = await self._list_tools(client)
            except Exception as exc:  # the connection task notices a crash; keep the list
                log.warning(
                    "MCP server %s: listing its changed tools failed: %s",
                    self.name,
                    self.redact(_describe(exc)),
                )
            else:
                self.listed = listed
                self.relists += 1
                log.info("MCP server %s changed its tools: %d tools", self.name, len(listed))
                if self._on_listed is not None:
                    self._on_listed(self, listed)
            await asyncio.sleep(RELIST_MIN_INTERVAL_S)

    async def _list_tools(self, client: Client) -> list[mcp_types.Tool]:
        found: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools[: MAX_TOOLS_PER_SERVER - len(found)])
            cursor = page.next_cursor
            if cursor is None or len(found) >= MAX_TOOLS_PER_SERVER:
                break
        return found

    # -- calls -----------------------------------------------------------------------------

    def unavailable_reason(self) -> str:
        if self.state == "closed":
            return "Teammate is shutting down"
        wait = self._next_start_at - self._clock()
        why = self.last_error or "it is not running"
        if wait > 0:
            return f"{why}; it is tried again in {math.ceil(wait)} s"
        return why

    async def call(
        self, tool: str, arguments: dict[str, Any], *, signal: CancelSignal
    ) -> mcp_types.CallToolResult:
        """Call `tool`, starting the server if needed, within the server's call timeout.

        Raises `McpUnavailable` or `McpCallFailed` with a text for the model; returns the
        result as the server sent it (the caller bounds it)."""
        if signal.cancelled:
            raise McpCallFailed(f"The call was stopped: {signal.reason or 'cancelled'}.")
        # The call runs in the caller's task (a task per call would cost two task switches);
        # the run's signal cancels it through a callback (no watcher task: nothing is
        # scheduled unless the signal is set), and the cancel becomes the model's message here.
        task = asyncio.current_task()
        assert task is not None
        fired = False

        def stop() -> None:
            nonlocal fired
            fired = True
            task.cancel()

        forget = signal.on_cancel(stop)
        try:
            return await self._call(tool, arguments, self.config.call_timeout_s)
        except asyncio.CancelledError:
            if not fired or task.uncancel() > 0:
                raise  # cancelled from outside as well: not ours to swallow
            raise McpCallFailed(f"The call was stopped: {signal.reason or 'cancelled'}.") from None
        finally:
            forget()

    async def _call(
        self, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> mcp_types.CallToolResult:
        began = self._clock()
        if not await self.wait_ready(timeout_s):
            if self.state == "starting":
                raise McpUnavailable(
                    f"MCP server '{self.name}' did not start within {timeout_s:g} s."
                )
            raise McpUnavailable(
                f"MCP server '{self.name}' is unavailable: {self.unavailable_reason()}."
            )
        client = self._client
        assert client is not None
        left = max(0.001, timeout_s - (self._clock() - began))
        try:
            async with asyncio.timeout(left):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise McpCallFailed(
                f"MCP server '{self.name}' did not answer within {timeout_s:g} s; the call "
                "was abandoned."
            ) from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._stop.set()  # the connection task records why and ends
                await self._wait_task_end()
                raise McpCallFailed(
                    f"MCP server '{self.name}' closed the connection during the call "
                    f"({self.last_error or 'it stopped'}); it is restarted on the next call."
                ) from None
            raise McpCallFailed(
                f"MCP server '{self.name}' refused the call: {self.redact(exc.error.message)}"
            ) from None
        except Exception as exc:
            raise McpCallFailed(
                f"MCP server '{self.name}' failed the call: {self.redact(_describe(exc))}"
            ) from None

    async def _wait_task_end(self) -> None:
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError, Exception):
                async with asyncio.timeout(3.0):
                    await asyncio.shield(task)


def _describe(exc: BaseException) -> str:
    """A one-line reason from an exception or a group of them (the first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, ResponseTooLarge):
        return f"it sent {exc}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.TransportError | OSError):
        return f"cannot connect: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _secret_values(config: McpServerConfig, environ: Mapping[str, str]) -> list[str]:
    values = []
    for variable in [*config.env.values(), *config.headers.values()]:
        value = environ.get(variable, "")
        if len(value) >= 4:
            values.append(value)
    # Longest first, so a secret containing another is replaced whole.
    return sorted(values, key=len, reverse=True)
