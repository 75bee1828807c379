"""Set-oriented group commit for a store on an async database driver (the SQLite and the
PostgreSQL backends both): concurrent calls become one transaction of a fixed number of
statements.

Owns: queuing store calls, deciding when a call runs alone and when calls run as one batch,
committing a batch, and isolating a failing call by retrying its batch with a savepoint per
call. Knows no SQL: an operation (`Op`) brings its own statements, a backend (`Transactions`)
its own BEGIN/COMMIT/SAVEPOINT.

How it stays correct and fast (docs/architecture.md, "Storage"):
- A unit of work (a lone call, or a batch) has a connection to itself. SQLite: ONE
  connection, one unit at a time (`Batcher(db, ...)`). PostgreSQL: up to `lanes` units at
  once, each on a connection of its own from a pool (`Batcher.pooled(...)`): a server runs
  them in parallel, and one batch waiting for a row lock another instance holds does not hold
  up every other call of this instance.
- A lone call skips the batcher: when nothing is queued and a lane is free, it runs at once,
  as its operation's `lone` (ideally ONE autocommit statement: one round trip, its own
  commit).
- Calls made while every lane is busy wait in the queue; when a unit ends they run together
  as one batch: BEGIN, each operation's `many` over ALL its calls at once (a fixed number of
  statements whatever their count: `executemany`, lookups through `json_each` or `unnest`,
  `RETURNING`), COMMIT. Every caller is answered only after the COMMIT ("each method commits
  before it returns"). `many` may answer a call with its own exception (e.g. a `KeyError`
  found by a lookup) as long as that call wrote nothing. An operation whose `many` is ONE
  statement (`many_is_one_statement`: atomic by itself, as PostgreSQL runs any statement)
  skips BEGIN/COMMIT when its calls are the whole batch: one round trip per batch.
- If a batch fails as a whole (a statement raised), it is rolled back and retried once with
  each call in its own SAVEPOINT through the operation's `one`: the failing call is undone
  alone and gets its exception; the others commit. Savepoints cost nothing on the fast path.
- A call runs whole (or not at all) whether or not its caller still waits: batches run in the
  batcher's own task, so a cancelled caller just never hears the result. A lone call on the
  one connection runs in its caller's task (its `lone` hands the driver its one statement at
  its first step: nothing to cut); a pooled one runs in a task of its own (a statement cut
  mid-way would cost the pool its connection).

Must not: know a schema or a driver; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

C = TypeVar("C")  # the backend's connection
C_contra = TypeVar("C_contra", contravariant=True)
C_co = TypeVar("C_co", covariant=True)
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


class Connections(Protocol[C_co]):
    """A pool: a connection for one unit of work, given back when the unit ends."""

    def acquire(self) -> AbstractAsyncContextManager[C_co]: ...


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
    `many_is_one_statement`: `many` is a single statement, atomic by itself: a batch of this
    operation's calls alone runs it without BEGIN/COMMIT.
    """

    name: str
    one: Callable[[C, A], Awaitable[R]]
    lone: Callable[[C, A], Awaitable[R]] | None = None
    many: Callable[[C, list[A]], Awaitable[Sequence[R | Exception]]] | None = None
    many_is_one_statement: bool = False


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
    """Runs store calls on one connection, or on up to `lanes` pooled ones at once: alone
    when a lane is free and nothing else is pending, else in set-oriented batches (see the
    module docstring)."""

    def __init__(self, db: C, transactions: Transactions[C]) -> None:
        """On ONE connection: one unit of work at a time."""
        self._db: C | None = db
        self._connections: Connections[C] | None = None
        self._tx = transactions
        self._lanes = 1
        self._queue: list[_Call] = []
        self._running = 0  # units on a connection (lone calls and workers)
        self._starting = False  # a worker was created and has not taken the queue yet
        self._idle = asyncio.Event()
        self._idle.set()

    @classmethod
    def pooled(
        cls, connections: Connections[C], transactions: Transactions[C], *, lanes: int
    ) -> Batcher[C]:
        """On connections from a pool: up to `lanes` units at once, each on its own."""
        batcher = cls.__new__(cls)
        cls.__init__(batcher, None, transactions)  # type: ignore[arg-type]
        batcher._connections = connections
        batcher._lanes = max(1, lanes)
        return batcher

    @property
    def db(self) -> C:
        """The one connection (not for a pooled batcher)."""
        if self._db is None:
            raise RuntimeError("a pooled batcher has no connection of its own")
        return self._db

    async def submit(self, op: Op[C, A, R], arg: A) -> R:
        """Run one call; return its result once committed."""
        if self._running < self._lanes and not self._queue and op.lone is not None:
            # A free lane and nothing pending: skip the queue and the worker.
            self._running += 1
            self._idle.clear()
            if self._connections is not None:
                # Its own task: a cancelled caller does not cut a pooled connection's
                # statement in half (the connection would have to be thrown away).
                task = asyncio.ensure_future(self._pooled_lone(self._connections, op, arg))
                task.add_done_callback(_retrieve)
                return await asyncio.shield(task)
            try:
                return await op.lone(self._db, arg)  # type: ignore[arg-type]
            finally:
                self._running -= 1
                self._after_unit()
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append(_Call(op, arg, future))
        self._after_unit()
        return await future

    async def _pooled_lone(self, connections: Connections[C], op: Op[C, A, R], arg: A) -> R:
        try:
            async with connections.acquire() as db:
                assert op.lone is not None
                return await op.lone(db, arg)
        finally:
            self._running -= 1
            self._after_unit()

    async def drain(self) -> None:
        """Wait until everything submitted so far has run."""
        while self._running or self._queue:
            await self._idle.wait()

    def _after_unit(self) -> None:
        """A unit ended or a call was queued: start a worker for the queue if a lane is free
        (one that has not started yet will take everything queued until it does)."""
        if self._queue and self._running < self._lanes and not self._starting:
            self._running += 1
            self._starting = True
            self._idle.clear()
            asyncio.get_running_loop().create_task(self._work())
        elif not self._running and not self._queue:
            self._idle.set()

    async def _work(self) -> None:
        try:
            while self._queue:
                calls, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._starting = False
                if self._connections is None:
                    await self._run_unit(self._db, calls)  # type: ignore[arg-type]
                    continue
                try:
                    async with self._connections.acquire() as db:
                        await self._run_unit(db, calls)
                except Exception as exc:  # no connection (or it broke): every caller hears
                    for call in calls:
                        call.settle(exc)
        finally:
            self._starting = False
            self._running -= 1
            self._after_unit()

    async def _run_unit(self, db: C, calls: list[_Call]) -> None:
        if len(calls) == 1:
            await self._run_lone(db, calls[0])
        else:
            await self._run_batch(db, calls)

    async def _run_lone(self, db: C, call: _Call) -> None:
        op = call.op
        try:
            if op.lone is not None:
                outcome: Any = await op.lone(db, call.arg)
            else:
                await self._tx.begin(db)
                try:
                    outcome = await op.one(db, call.arg)
                    await self._tx.commit(db)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await self._tx.rollback(db)
                    raise
        except Exception as exc:
            outcome = exc
        call.settle(outcome)

    async def _run_batch(self, db: C, calls: list[_Call]) -> None:
        groups: dict[Op[Any, Any, Any], list[_Call]] = {}
        for call in calls:
            groups.setdefault(call.op, []).append(call)
        if len(groups) == 1:
            (op,) = groups
            if op.many is not None and op.many_is_one_statement:
                # One statement, its own transaction: no BEGIN, no COMMIT.
                try:
                    results = await op.many(db, [call.arg for call in calls])
                    if len(results) != len(calls):
                        raise RuntimeError(f"{op.name}: {len(results)} results for {len(calls)}")
                except Exception:
                    await self._run_isolated(db, calls)
                    return
                for call, outcome in zip(calls, results, strict=True):
                    call.settle(outcome)
                return
        outcomes: list[tuple[_Call, Any]] = []
        try:
            await self._tx.begin(db)
        except Exception as exc:
            for call in calls:
                call.settle(exc)
            return
        try:
            for op, group in groups.items():
                args = [call.arg for call in group]
                if op.many is not None:
                    found: Sequence[Any] = await op.many(db, args)
                    if len(found) != len(group):
                        raise RuntimeError(f"{op.name}: {len(found)} results for {len(group)}")
                else:
                    found = [await op.one(db, arg) for arg in args]
                outcomes += zip(group, found, strict=True)
            await self._tx.commit(db)
        except Exception:
            with contextlib.suppress(Exception):
                await self._tx.rollback(db)
            await self._run_isolated(db, calls)
            return
        for call, outcome in outcomes:
            call.settle(outcome)

    async def _run_isolated(self, db: C, calls: list[_Call]) -> None:
        """The retry of a failed batch: each call in its own SAVEPOINT, one transaction."""
        try:
            await self._tx.begin(db)
        except Exception as exc:
            for call in calls:
                call.settle(exc)
            return
        outcomes: list[tuple[_Call, Any]] = []
        failed: list[tuple[_Call, Exception]] = []
        try:
            for call in calls:
                await self._tx.savepoint(db)
                try:
                    value = await call.op.one(db, call.arg)
                except Exception as exc:
                    await self._tx.rollback_to(db)
                    failed.append((call, exc))
                else:
                    await self._tx.release(db)
                    outcomes.append((call, value))
            await self._tx.commit(db)
        except Exception as exc:  # the transaction itself failed: nobody's write stands
            with contextlib.suppress(Exception):
                await self._tx.rollback(db)
            for call in calls:
                call.settle(exc)
            return
        for call, outcome in [*outcomes, *failed]:
            call.settle(outcome)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A lone call's outcome is read here too: its caller may have stopped waiting."""
    if not task.cancelled():
        task.exception()
