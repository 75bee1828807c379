"""The SQLite store's database thread: one connection, calls in batches, group commit.

Owns: the daemon thread that creates, uses and closes the store's only connection; how calls
are queued, batched, run in transactions and answered. Knows nothing of the schema: a call is a
synchronous function over the connection (its whole transaction body).

How it stays correct and fast:
- Every store method hands this thread ONE body and awaits ONE future: a call costs one hop to
  the thread and back, however many statements it runs. Results come back with
  `loop.call_soon_threadsafe`, once per batch, not per call.
- Group commit: the thread takes everything pending (at most `MAX_BATCH` calls) at once. The
  batch's reads run first, in one read transaction (one snapshot), and are answered at once.
  Its writes then run in ONE `BEGIN IMMEDIATE ... COMMIT`, each body inside its own
  `SAVEPOINT`: a body that raises is rolled back alone and its exception goes to its own
  caller; every other caller is answered only after the `COMMIT` succeeded ("each method
  commits before it returns"). If the `COMMIT` fails, every writer of the batch gets the error.
  Every call in a batch was pending at the same moment, so running its reads before its writes
  is a valid order: a read still sees every write whose call returned before it was issued.
- `BEGIN IMMEDIATE` takes the write lock before anything is read, so a second process (a CLI
  beside the bot) waits on `busy_timeout` (in this thread, never the event loop) instead of
  failing with `SQLITE_BUSY` when its read snapshot went stale.
- Cancellation: a call is queued the moment it is submitted and then runs whole (or, if its
  body raises, not at all) whether or not its caller is still waiting; a cancelled caller just
  never hears the result. The thread never leaves a transaction open between batches.
- A stop is queued behind everything already queued, so pending calls finish first; the thread
  is a daemon, so an exiting process never waits for it.

Must not: know the schema or the store's records; import `tools` or `bots`.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Body = Callable[[sqlite3.Connection], T]

# The most calls one batch (and so one write transaction) takes: bounds the latency a call can
# add to the calls queued behind it.
MAX_BATCH = 500

Kind = Literal["setup", "read", "write", "stop"]


def nothing(db: sqlite3.Connection) -> None:
    return None


class _Call:
    """One store call waiting for the thread: its body, and where its result goes."""

    __slots__ = ("body", "error", "future", "kind", "loop", "value")

    def __init__(
        self,
        kind: Kind,
        body: Body[Any],
        loop: asyncio.AbstractEventLoop | None,
        future: asyncio.Future[Any] | None,
    ) -> None:
        self.kind = kind
        self.body = body
        self.loop = loop
        self.future = future
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self, db: sqlite3.Connection) -> bool:
        """Run the body; keep its result or exception. True if it returned."""
        try:
            self.value = self.body(db)
        except Exception as exc:
            self.error = exc
            return False
        self.error = None
        return True


class DbThread:
    """A daemon thread that owns one connection and runs store calls in batches.

    Holds no reference to the store, so a forgotten store can be collected (its finalizer
    then stops this thread).
    """

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, name=f"sqlite-store:{path}", daemon=True
        )
        self._thread.start()

    def submit(self, kind: Kind, body: Body[T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put(_Call(kind, body, loop, future))
        return future

    def join(self) -> None:
        """Wait for the thread to end: only after its stop was answered, so a moment at most."""
        self._thread.join(timeout=5.0)

    def stop(self) -> None:
        """Stop after everything queued so far, without waiting (a finalizer's stop)."""
        self._calls.put(_Call("stop", nothing, None, None))

    # --- on the thread --------------------------------------------------------------------

    def _serve(self) -> None:
        db: sqlite3.Connection | None = None
        broken: BaseException | None = None
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # autocommit: every transaction here is explicit
                cached_statements=256,
            )
        except Exception as exc:
            broken = exc
        calls = self._calls
        held: _Call | None = None
        stop: _Call | None = None
        while stop is None:
            call = held if held is not None else calls.get()
            held = None
            if call.kind == "stop":
                stop = call
                break
            if db is None:
                assert broken is not None
                call.error = broken
                _deliver([call])
                continue
            if call.kind == "setup":
                call.run(db)
                _deliver([call])
                continue
            held = self._run_batch(db, call)
            del call  # keep no result alive while waiting for the next call

        if db is not None:
            with contextlib.suppress(Exception):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                db.close()
        # Nothing should be queued behind a stop (a closed store refuses calls); if anything
        # is, it must not wait forever.
        while True:
            try:
                late = calls.get_nowait()
            except queue.Empty:
                break
            late.error = RuntimeError(f"the store for {self._path} is closed")
            _deliver([late])
        _deliver([stop])  # the last thing this thread does

    def _run_batch(self, db: sqlite3.Connection, first: _Call) -> _Call | None:
        """Run `first` and whatever else is queued behind it (up to `MAX_BATCH` reads and
        writes): reads in one snapshot, answered at once, then writes in one transaction,
        answered after its COMMIT. Returns a setup or stop call met meanwhile, to run next."""
        reads: list[_Call] = []
        writes: list[_Call] = []
        (reads if first.kind == "read" else writes).append(first)
        held: _Call | None = None
        while len(reads) + len(writes) < MAX_BATCH:
            try:
                more = self._calls.get_nowait()
            except queue.Empty:
                break
            if more.kind == "read":
                reads.append(more)
            elif more.kind == "write":
                writes.append(more)
            else:
                held = more
                break
        if reads:
            _run_reads(db, reads)
            _deliver(reads)
        if writes:
            _run_writes(db, writes)
            _deliver(writes)
        return held


def _run_reads(db: sqlite3.Connection, reads: list[_Call]) -> None:
    """Run read bodies in one read transaction: one snapshot for the whole batch."""
    try:
        db.execute("BEGIN")
    except Exception as exc:
        for call in reads:
            call.error = exc
        return
    for call in reads:
        if not db.in_transaction:  # SQLite ended it after an error: start another
            try:
                db.execute("BEGIN")
            except Exception as exc:
                call.error = exc
                continue
        call.run(db)
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("COMMIT")
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _run_writes(db: sqlite3.Connection, writes: list[_Call]) -> None:
    """Run write bodies in one `BEGIN IMMEDIATE ... COMMIT`, each in its own SAVEPOINT.

    A body that raises is undone alone (its caller gets its exception). If SQLite rolled the
    whole transaction back meanwhile (e.g. disk full), the bodies that had succeeded are undone
    too: they run again, in a new transaction, without the one that failed. Bodies that
    succeeded keep `error = None` only once the COMMIT succeeded.
    """
    todo = writes
    while todo:
        try:
            db.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            for call in todo:
                call.error = exc
            return
        succeeded: list[_Call] = []
        lost_at: int | None = None
        for position, call in enumerate(todo):
            try:
                db.execute("SAVEPOINT store_call")
            except Exception as exc:
                call.error = exc
                _abandon(db)
                lost_at = position
                break
            if call.run(db):
                try:
                    db.execute("RELEASE store_call")
                except Exception as exc:
                    call.error = exc
                    _abandon(db)
                    lost_at = position
                    break
                succeeded.append(call)
            elif not _undo_savepoint(db):
                lost_at = position
                break
        if lost_at is not None:
            todo = succeeded + todo[lost_at + 1 :]
            continue
        try:
            db.execute("COMMIT")
        except Exception as exc:
            with contextlib.suppress(Exception):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            for call in succeeded:
                call.value = None
                call.error = exc
        return


def _undo_savepoint(db: sqlite3.Connection) -> bool:
    """Roll back the current call's savepoint; False if the whole transaction is gone."""
    if not db.in_transaction:
        return False
    try:
        db.execute("ROLLBACK TO store_call")
        db.execute("RELEASE store_call")
    except Exception:
        _abandon(db)
        return False
    return True


def _abandon(db: sqlite3.Connection) -> None:
    """After a failed SAVEPOINT, RELEASE or ROLLBACK TO: end the transaction in doubt."""
    with contextlib.suppress(Exception):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _deliver(calls: list[_Call]) -> None:
    """Hand each call's outcome to its event loop: one wake-up per loop for the whole list."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
    for call in calls:
        if call.loop is not None:
            by_loop.setdefault(call.loop, []).append(call)
    for loop, settled in by_loop.items():
        # A closed loop has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, settled)


def _settle(calls: list[_Call]) -> None:
    for call in calls:
        future = call.future
        if future is None or future.done():  # e.g. its caller was cancelled
            continue
        if call.error is None:
            future.set_result(call.value)
        else:
            future.set_exception(call.error)
