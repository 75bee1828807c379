"""The PostgreSQL store beside the SQLite store, measured in one run on this machine.

Run: `uv run python -m benchmarks.pg_bench` or `uv run python benchmarks/pg_bench.py`.
The server: `TEAMMATE_TEST_DATABASE_URL`, else one on 127.0.0.1:5432 (trust, database `test`),
else a throwaway cluster (`tests/storage/pg.py`: fsync off, so the figures are the store's and
the protocol's cost, not a disk's). Prints the conditions, a table, and last one JSON line with
`sqlite_overhead_ms_per_turn`, `pg_overhead_ms_per_turn`, `pg_vs_sqlite_per_turn`,
`sqlite_appends_per_s_200_concurrent` and `pg_appends_per_s_200_concurrent`.

A turn is what the runner asks of the store for one answer with one tool call: accept the
message into the inbox, start the run delivering it, load the history, append the reply with
its usage, the tool result and the final reply with its usage, and finish the run; on
PostgreSQL each of the run's writes carries the conversation's lease (fencing, as the runner's
do: the lease is taken once per conversation, before the turns). Target: PostgreSQL's overhead
per turn within 3x of SQLite's. A measurement, not a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/pg_bench.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import functools
import json
import os
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from benchmarks.storage_bench import realistic_message
from core.messages import AssistantMessage, Message, Usage, UserMessage
from storage.base import ConversationStore, coordination_of
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests.storage import pg

TURNS = 300
WARMUP = 30
HISTORY = 30  # messages already in each conversation a turn happens in
CONVERSATIONS = 20
CONCURRENT_CONVERSATIONS = 200
CONCURRENT_APPENDS_EACH = 25

Opener = Callable[[], AbstractAsyncContextManager[Any]]


async def one_turn(store: ConversationStore, key: str, n: int, messages: list[Message]) -> None:
    user, reply, result = messages[0], messages[1], messages[2]
    assert isinstance(user, UserMessage) and isinstance(reply, AssistantMessage)
    accepted = await store.accept_delivery(
        key, user, channel_key="bench", delivery_id=f"{key}:{n}", surface_ref={"ts": str(n)}
    )
    assert accepted is not None
    conversation_id = accepted.conversation.id
    fence = coordination_of(store).fence(conversation_id)  # None on SQLite
    run = await store.start_run(
        conversation_id,
        user_id="U1",
        model="m",
        owner={"pid": 1},
        deliver=[accepted.item.id],
        fence=fence,
    )
    await store.load(conversation_id)
    usage = Usage(input=1200, output=85, cache_read=15000, cost=0.0071)
    await store.append_message(
        conversation_id, reply, run_id=run.id, usage=usage, model="m", fence=fence
    )
    await store.append_message(conversation_id, result, run_id=run.id, fence=fence)
    await store.append_message(
        conversation_id, reply, run_id=run.id, usage=usage, model="m", fence=fence
    )
    await store.finish_run(run.id, "done", fence=fence)


async def measure(
    open_store: Opener, messages: list[Message], *, turns_n: int = TURNS, appends_each: int = 0
) -> dict[str, float]:
    appends_each = appends_each or CONCURRENT_APPENDS_EACH
    async with open_store() as store:
        keys = [f"bench:turn:{n}" for n in range(CONVERSATIONS)]
        for key in keys:
            conversation = await store.get_or_create_conversation(key, channel_key="bench")
            await coordination_of(store).acquire_lease(conversation.id)
            for message in messages[:HISTORY]:
                await store.append_message(conversation.id, message)
        turns: list[float] = []
        for n in range(WARMUP + turns_n):
            start = time.perf_counter()
            await one_turn(store, keys[n % CONVERSATIONS], n, messages)
            if n >= WARMUP:
                turns.append((time.perf_counter() - start) * 1000)

        async def converse(n: int) -> None:
            conversation = await store.get_or_create_conversation(
                f"bench:concurrent:{n}", channel_key="c"
            )
            for i in range(appends_each):
                await store.append_message(conversation.id, messages[i])

        start = time.perf_counter()
        await asyncio.gather(*(converse(n) for n in range(CONCURRENT_CONVERSATIONS)))
        concurrent_s = time.perf_counter() - start
    return {
        "turn_ms": statistics.median(turns),
        "turn_p95_ms": sorted(turns)[int(len(turns) * 0.95) - 1],
        "appends_per_s": CONCURRENT_CONVERSATIONS * appends_each / concurrent_s,
    }


async def run(
    directory: str, server: pg.PgServer, *, turns_n: int = TURNS, appends_each: int = 0
) -> dict[str, float]:
    """Both backends, interleaved; prints the table. `turns_n` and `appends_each` shrink the
    run (a smoke test, or another benchmark reusing this measurement)."""
    rng = random.Random(7)
    messages = [realistic_message(i, rng) for i in range(max(HISTORY, CONCURRENT_APPENDS_EACH))]
    schema = await server.create_schema("bench")
    url = server.schema_url(schema)
    try:
        # Interleaved rounds, so both backends see the same machine state.
        sqlite_runs: list[dict[str, float]] = []
        pg_runs: list[dict[str, float]] = []
        for round_ in range(2):
            path = Path(directory) / f"bench{round_}.db"
            sqlite_runs.append(
                await measure(
                    functools.partial(SqliteStore.open, path),
                    messages,
                    turns_n=turns_n,
                    appends_each=appends_each,
                )
            )
            await server.drop_schema(schema)
            schema = await server.create_schema("bench")
            url = server.schema_url(schema)
            pg_runs.append(
                await measure(
                    functools.partial(PostgresStore.open, url),
                    messages,
                    turns_n=turns_n,
                    appends_each=appends_each,
                )
            )
    finally:
        await server.drop_schema(schema)

    def best(runs: list[dict[str, float]], name: str, low: bool = True) -> float:
        values = [r[name] for r in runs]
        return min(values) if low else max(values)

    sqlite_turn, pg_turn = best(sqlite_runs, "turn_ms"), best(pg_runs, "turn_ms")
    sqlite_p95, pg_p95 = best(sqlite_runs, "turn_p95_ms"), best(pg_runs, "turn_p95_ms")
    sqlite_aps = best(sqlite_runs, "appends_per_s", low=False)
    pg_aps = best(pg_runs, "appends_per_s", low=False)
    print(f"{'measure':<44}{'SQLite':>12}{'PostgreSQL':>12}{'ratio':>8}")
    print(
        f"{'store overhead per turn, median ms':<44}{sqlite_turn:>12.3f}{pg_turn:>12.3f}"
        f"{pg_turn / sqlite_turn:>7.2f}x"
    )
    print(
        f"{'store overhead per turn, p95 ms':<44}{sqlite_p95:>12.3f}{pg_p95:>12.3f}"
        f"{pg_p95 / sqlite_p95:>7.2f}x"
    )
    print(
        f"{'appends/s, 200 conversations at once':<44}{sqlite_aps:>12.0f}{pg_aps:>12.0f}"
        f"{pg_aps / sqlite_aps:>7.2f}x"
    )
    ratio = pg_turn / sqlite_turn
    print(f"PostgreSQL / SQLite per turn: {ratio:.2f}x (target <= 3x)")
    return {
        "sqlite_overhead_ms_per_turn": round(sqlite_turn, 3),
        "pg_overhead_ms_per_turn": round(pg_turn, 3),
        "pg_vs_sqlite_per_turn": round(ratio, 2),
        "sqlite_appends_per_s_200_concurrent": round(sqlite_aps, 1),
        "pg_appends_per_s_200_concurrent": round(pg_aps, 1),
    }


def main() -> None:
    with pg.server() as server:
        if server is None:
            print(f"no PostgreSQL server: {pg.unavailable_reason}")
            raise SystemExit(1)
        with tempfile.TemporaryDirectory(prefix="teammate-bench-") as directory:
            print(f"python {platform.python_version()} ({platform.python_implementation()})")
            print(f"sqlite {sqlite3.sqlite_version} (WAL, synchronous=NORMAL, one DB thread)")
            where = "throwaway cluster, fsync off" if server.throwaway else "existing server"
            print(f"postgresql {server.version} ({where}; asyncpg pool of 10, 127.0.0.1)")
            print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
            print(
                f"turns: {TURNS} (after {WARMUP} warm-up) over {CONVERSATIONS} conversations "
                f"of {HISTORY}+ messages; best of 2 interleaved rounds"
            )
            print()
            figures = asyncio.run(run(directory, server))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
