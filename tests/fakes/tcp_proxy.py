"""A TCP proxy on 127.0.0.1 that can go silent: the connections it carries stay open but
nothing more passes (a half-open connection, as a NAT or firewall that forgot a flow leaves
it), while new connections are carried as before. It can also refuse new connections (the
database unreachable) or take them and never answer (a database or pooler that hangs)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class _Flow:
    writers: list[asyncio.StreamWriter]
    silent: bool = False
    ended: bool = False  # one side closed it


@dataclass
class TcpProxy:
    target_host: str
    target_port: int
    port: int = 0
    refusing: bool = False  # new connections are closed at once (the database unreachable)
    refused: int = 0
    black_holing: bool = False  # new connections are taken and never answered
    black_holed: int = 0
    _a_refusal: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None
    _flows: list[_Flow] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def silence_open_connections(self) -> int:
        """Every connection open now goes silent for good; returns how many."""
        for flow in self._flows:
            flow.silent = True
        return len(self._flows)

    def carrying(self) -> int:
        """How many connections are open through the proxy now (silent ones included)."""
        return sum(1 for flow in self._flows if not flow.ended)

    async def refusals(self, count: int) -> None:
        """Wait until `count` connections have been refused."""
        while self.refused < count:
            self._a_refusal.clear()
            await self._a_refusal.wait()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for flow in self._flows:
            for writer in flow.writers:
                writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _carry(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.refusing:
            self.refused += 1
            self._a_refusal.set()
            client_w.close()
            return
        if self.black_holing:
            self.black_holed += 1
            flow = _Flow([client_w], silent=True)
            self._flows.append(flow)
            task = asyncio.create_task(self._pipe(flow, client_r, client_w))  # swallows
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        try:
            server_r, server_w = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            client_w.close()
            return
        flow = _Flow([client_w, server_w])
        self._flows.append(flow)
        for reader, writer in ((client_r, server_w), (server_r, client_w)):
            task = asyncio.create_task(self._pipe(flow, reader, writer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(
        flow: _Flow, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if flow.silent:
                    continue  # swallowed: the peer never hears of it, and never of a close
                writer.write(data)
                await writer.drain()
            if not flow.silent:
                writer.close()
        flow.ended = True


@contextlib.asynccontextmanager
async def proxying(host: str, port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
