"""The shared batcher on a pool (as the PostgreSQL store runs it): up to `lanes` units at once,
each on its own connection; calls made while every lane is busy form one batch; a batch of an
operation whose `many` is one statement runs without BEGIN/COMMIT, and is retried with a
savepoint per call when it fails.

The driver here is a recording stand-in (a list of statements per connection): what is
tested is the batcher's own scheduling, which no real driver would make visible.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from storage.batching import Batcher, Op


class Connection:
    def __init__(self, name: str) -> None:
        self.name = name
        self.statements: list[str] = []


class Pool:
    def __init__(self, size: int) -> None:
        self.idle = [Connection(f"c{n}") for n in range(size)]
        self.in_use = 0
        self.most_in_use = 0

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Connection]:
        connection = self.idle.pop()
        self.in_use += 1
        self.most_in_use = max(self.most_in_use, self.in_use)
        try:
            yield connection
        finally:
            self.in_use -= 1
            self.idle.append(connection)


class Transactions:
    async def begin(self, db: Connection) -> None:
        db.statements.append("BEGIN")

    async def commit(self, db: Connection) -> None:
        db.statements.append("COMMIT")

    async def rollback(self, db: Connection) -> None:
        db.statements.append("ROLLBACK")

    async def savepoint(self, db: Connection) -> None:
        db.statements.append("SAVEPOINT")

    async def release(self, db: Connection) -> None:
        db.statements.append("RELEASE")

    async def rollback_to(self, db: Connection) -> None:
        db.statements.append("ROLLBACK TO")


def make_op(opened: asyncio.Event) -> Op[Connection, int, int]:
    """Doubles numbers; a lone call waits for `opened` (it holds its lane until then); a
    negative number fails its statement (and, in a batch, the whole statement)."""

    async def one(db: Connection, n: int) -> int:
        db.statements.append(f"one {n}")
        if n < 0:
            raise ValueError(n)
        return n * 2

    async def lone(db: Connection, n: int) -> int:
        db.statements.append(f"lone {n}")
        await opened.wait()
        db.statements.append(f"lone {n} answered")
        return n * 2

    async def many(db: Connection, ns: list[int]) -> list[int | Exception]:
        db.statements.append(f"many {ns}")
        if any(n < 0 for n in ns):
            raise ValueError(ns)
        return [n * 2 for n in ns]

    return Op("double", one=one, lone=lone, many=many, many_is_one_statement=True)


async def test_lanes_run_at_once_and_calls_behind_them_form_one_statement_without_begin() -> None:
    pool = Pool(3)
    opened = asyncio.Event()
    batcher = Batcher.pooled(pool, Transactions(), lanes=2)
    op = make_op(opened)
    tasks = [asyncio.ensure_future(batcher.submit(op, n)) for n in range(1, 7)]
    for _ in range(5):  # let the lone calls start and the rest queue
        await asyncio.sleep(0)
    assert pool.in_use == 2  # two lanes: two lone calls, each on its own connection
    opened.set()

    assert await asyncio.gather(*tasks) == [2, 4, 6, 8, 10, 12]
    await batcher.drain()
    statements = sorted(s for c in pool.idle for s in c.statements)
    # No BEGIN, no COMMIT.
    assert statements == [
        "lone 1",
        "lone 1 answered",
        "lone 2",
        "lone 2 answered",
        "many [3, 4, 5, 6]",
    ]
    assert pool.most_in_use == 2


async def test_a_failed_one_statement_batch_is_retried_with_a_savepoint_per_call() -> None:
    pool = Pool(1)
    opened = asyncio.Event()
    batcher = Batcher.pooled(pool, Transactions(), lanes=1)
    op = make_op(opened)
    tasks = [asyncio.ensure_future(batcher.submit(op, n)) for n in (1, 2, -3, 4)]
    await asyncio.sleep(0)
    opened.set()

    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert results[:2] == [2, 4] and results[3] == 8
    assert isinstance(results[2], ValueError)
    (connection,) = pool.idle
    assert connection.statements == [
        "lone 1",
        "lone 1 answered",
        "many [2, -3, 4]",
        "BEGIN",
        *["SAVEPOINT", "one 2", "RELEASE"],
        *["SAVEPOINT", "one -3", "ROLLBACK TO"],
        *["SAVEPOINT", "one 4", "RELEASE"],
        "COMMIT",
    ]


async def test_a_pooled_lone_call_whose_caller_gives_up_still_runs_whole() -> None:
    # Cut mid-statement, a pooled connection would be in an unknown state (the pool drops it).
    pool = Pool(1)
    opened = asyncio.Event()
    batcher = Batcher.pooled(pool, Transactions(), lanes=1)
    caller = asyncio.ensure_future(batcher.submit(make_op(opened), 5))
    for _ in range(5):
        await asyncio.sleep(0)
    assert pool.in_use == 1
    caller.cancel()
    await asyncio.sleep(0)
    opened.set()

    await batcher.drain()

    assert caller.cancelled()
    (connection,) = pool.idle
    assert connection.statements == ["lone 5", "lone 5 answered"]
