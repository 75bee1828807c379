"""What a store's `open()` returns, on every backend: await it, or `async with` it.

Owns: `Opening`, which wraps the coroutine that opens a store so a caller may write either
`store = await Store.open(...)` or `async with Store.open(...) as store:` (closed on exit).

Must not: know a backend; import `tools` or `bots`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar


class Closable(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=Closable)


class Opening(Generic[S]):
    """What `open()` returns: await it for a store, or `async with` it."""

    def __init__(self, opening: Awaitable[S]) -> None:
        self._opening = opening
        self._store: S | None = None

    def __await__(self) -> Generator[Any, None, S]:
        return self._opening.__await__()

    async def __aenter__(self) -> S:
        self._store = await self._opening
        return self._store

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._store is not None:
            await self._store.close()
