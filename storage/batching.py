"""Set-oriented group commit for a store on an async database driver (SQLite now, PostgreSQL
could share it): concurrent calls become one transaction of a fixed number of statements.

Owns: queuing store calls, deciding when a call runs alone and when calls run as one batch,
committing a batch, and isolating a failing call by retrying its batch with a savepoint per
call. Knows no SQL: an operation (`Op`) brings its own statements, a backend (`Transactions`)
its own BEGIN/COMMIT/SAVEPOINT.

How it stays correct and fast (docs/architecture.md, "Storage"):
- At most one unit of work is on the connection at a time: a lone call, or a batch.
- A lone call skips the batcher: when nothing is queued or running, it runs at once, as its
  operation's `lone` (ideally ONE autocommit statement: one round trip, its own commit).
- Calls made while a unit runs wait in the queue; when the unit ends they run together as one
  batch: BEGIN, each operation's `many` over ALL its calls at once (a fixed number of
  statements whatever their count: `executemany`, lookups through `json_each`, `RETURNING`),
  COMMIT. Every caller is answered only after the COMMIT ("each method commits before it
  returns"). `many` may answer a call with its own exception (e.g. a `KeyError` found by a
  lookup) as long as that call wrote nothing.
- If a batch fails as a whole (a statement raised), it is rolled back and retried once with
  each call in its own SAVEPOINT through the operation's `one`: the failing call is undone
  alone and gets its exception; the others commit. Savepoints cost nothing on the fast path.
- A call runs whole (or not at all) whether or not its caller still waits: batches run in the
  batcher's own task, so a cancelled caller just never hears the result.

Must not: know a schema or a driver; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

C = TypeVar("C")  # the backend's connection
C_contra = TypeVar("C_contra", contravariant=True)
A = TypeVar("A")  # one call's arguments
R = TypeVar("R")  # one call's result

# The most calls one batch takes: bounds the latency a call can add to those behind it.
MAX_BATCH = 500


class Transactions(Protocol[C_contra]):
    """The backend's transaction statements on its connection."""

    async def begin(self, db: C_contra) -> None: ...
    async def commit(self, db: C_contra) -> None: ...
    async def rollback(self, db: C_contra) -> None: ...
    async def savepoint(self, db: C_contra) -> None: ...
    async def release(self, db: C_contra) -> None: ...
    async def rollback_to(self, db: C_contra) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class Op(Generic[C, A, R]):
    """One kind of store call.

    `one`: the call's statements inside a transaction someone else opened.
    `lone`: the whole call on its own, committed: ONE driver call (one autocommit statement),
    issued at its first step, so that it is safe to cancel its caller; None: `one` inside its
    own transaction, run by the batcher's task.
    `many`: every call of a batch at once, inside the batch's transaction, in a fixed number
    of statements; one result or exception per call, in order. None: `one` per call (for
    calls too rare to be worth it).
    """

    name: str
    one: Callable[[C, A], Awaitable[R]]
    lone: Callable[[C, A], Awaitable[R]] | None = None
    many: Callable[[C, list[A]], Awaitable[Sequence[R | Exception]]] | None = None


class _Call:
    __slots__ = ("arg", "future", "op")

    def __init__(self, op: Op[Any, Any, Any], arg: Any, future: asyncio.Future[Any]) -> None:
        self.op = op
        self.arg = arg
        self.future = future

    def settle(self, outcome: Any) -> None:
        if self.future.done():  # its caller was cancelled
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


class Batcher(Generic[C]):
    """Runs store calls on one connection: alone when nothing else is pending, else in
    set-oriented batches (see the module docstring)."""

    def __init__(self, db: C, transactions: Transactions[C]) -> None:
        self._db = db
        self._tx = transactions
        self._queue: list[_Call] = []
        self._busy = False  # a unit (a lone call or a batch) is on the connection
        self._worker: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def db(self) -> C:
        return self._db

    async def submit(self, op: Op[C, A, R], arg: A) -> R:
        """Run one call; return its result once committed."""
        loop = asyncio.get_running_loop()
        if not self._busy and not self._queue and op.lone is not None:
            # Nothing else pending: skip the queue and the worker. `lone` hands the driver its
            # one statement at its first step, so a cancelled caller cannot cut it in half.
            self._busy = True
            self._idle.clear()
            try:
                return await op.lone(self._db, arg)
            finally:
                if self._queue:  # calls made meanwhile: their batch runs now
                    self._worker = loop.create_task(self._work())
                else:
                    self._busy = False
                    self._idle.set()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.append(_Call(op, arg, future))
        if not self._busy:
            self._busy = True
            self._idle.clear()
            self._worker = loop.create_task(self._work())
        return await future

    async def drain(self) -> None:
        """Wait until everything submitted so far has run."""
        while self._busy or self._queue:
            await self._idle.wait()

    async def _work(self) -> None:
        try:
            while self._queue:
                calls, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                if len(calls) == 1:
                    await self._run_lone(calls[0])
                else:
                    await self._run_batch(calls)
        finally:
            self._busy = False
            self._idle.set()
            self._worker = None

    async def _run_lone(self, call: _Call) -> None:
        op = call.op
        try:
            if op.lone is not None:
                outcome: Any = await op.lone(self._db, call.arg)
            else:
                await self._tx.begin(self._db)
                try:
                    outcome = await op.one(self._db, call.arg)
                    await self._tx.commit(self._db)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await self._tx.rollback(self._db)
                    raise
        except Exception as exc:
            outcome = exc
        call.settle(outcome)

    async def _run_batch(self, calls: list[_Call]) -> None:
        groups: dict[Op[Any, Any, Any], list[_Call]] = {}
        for call in calls:
            groups.setdefault(call.op, []).append(call)
        outcomes: list[tuple[_Call, Any]] = []
        try:
            await self._tx.begin(self._db)
        except Exception as exc:
            for call in calls:
                call.settle(exc)
            return
        try:
            for op, group in groups.items():
                args = [call.arg for call in group]
                if op.many is not None:
                    results: Sequence[Any] = await op.many(self._db, args)
                    if len(results) != len(group):
                        raise RuntimeError(f"{op.name}: {len(results)} results for {len(group)}")
                else:
                    results = [await op.one(self._db, arg) for arg in args]
                outcomes += zip(group, results, strict=True)
            await self._tx.commit(self._db)
        except Exception:
            with contextlib.suppress(Exception):
                await self._tx.rollback(self._db)
            await self._run_isolated(calls)
            return
        for call, outcome in outcomes:
            call.settle(outcome)

    async def _run_isolated(self, calls: list[_Call]) -> None:
        """The retry of a failed batch: each call in its own SAVEPOINT, one transaction."""
        try:
            await self._tx.begin(self._db)
        except Exception as exc:
            for call in calls:
                call.settle(exc)
            return
        outcomes: list[tuple[_Call, Any]] = []
        failed: list[tuple[_Call, Exception]] = []
        try:
            for call in calls:
                await self._tx.savepoint(self._db)
                try:
                    value = await call.op.one(self._db, call.arg)
                except Exception as exc:
                    await self._tx.rollback_to(self._db)
                    failed.append((call, exc))
                else:
                    await self._tx.release(self._db)
                    outcomes.append((call, value))
            await self._tx.commit(self._db)
        except Exception as exc:  # the transaction itself failed: nobody's write stands
            with contextlib.suppress(Exception):
                await self._tx.rollback(self._db)
            for call in calls:
                call.settle(exc)
            return
        for call, outcome in [*outcomes, *failed]:
            call.settle(outcome)
