"""The SQL of scheduled work on PostgreSQL.

Owns: the calls behind the schedule methods of `PostgresStore` (their statements are
`storage.statements`, shared with SQLite, all but the claim's), each run by the store in one
transaction on one pooled connection. A bounded add takes the channel's advisory lock first
(`postgres_memory.lock_channel`), so concurrent adds from any number of instances cannot pass
the bound together; a claim is one conditional `UPDATE ... RETURNING` (the second of two
racing instances waits for the first's row lock, then finds the row no longer due).

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import asyncpg

from storage import statements
from storage.base import Schedule, TooManySchedules
from storage.postgres_memory import lock_channel
from storage.rows import SCHEDULE_COLUMNS, schedule_from


async def add_schedule(
    connection: asyncpg.Connection,
    channel_key: str,
    prompt: str,
    cron: str | None,
    timezone: str,
    next_run_at: float,
    by_id: str,
    by_name: str,
    max_active: int,
    now: float,
) -> Schedule:
    """In a transaction: lock the channel, check the bound, insert."""
    await lock_channel(connection, channel_key)
    count = await connection.fetchval(statements.ACTIVE_SCHEDULES_HELD.postgres, channel_key)
    if int(count) >= max_active:
        raise TooManySchedules(f"the channel has {int(count)} active schedules")
    row = await connection.fetchrow(
        statements.ADD_SCHEDULE.postgres,
        channel_key,
        prompt,
        cron,
        timezone,
        next_run_at,
        by_id,
        by_name,
        now,
    )
    return schedule_from(row)


async def schedules(connection: asyncpg.Connection, channel_key: str) -> list[Schedule]:
    found = await connection.fetch(statements.SCHEDULES.postgres, channel_key)
    return [schedule_from(row) for row in found]


async def due(connection: asyncpg.Connection, now: float, limit: int) -> list[Schedule]:
    found = await connection.fetch(statements.DUE.postgres, now, limit)
    return [schedule_from(row) for row in found]


async def cancel(connection: asyncpg.Connection, channel_key: str, schedule_id: int) -> bool:
    found = await connection.fetchval(statements.CANCEL_SCHEDULE.postgres, channel_key, schedule_id)
    return found is not None


async def claim(
    connection: asyncpg.Connection,
    schedule_id: int,
    due_at: float,
    next_run_at: float | None,
    now: float,
) -> Schedule | None:
    # Not shared: `$3` stands alone in `IS NULL`, so PostgreSQL needs its type spelled out.
    row = await connection.fetchrow(
        "UPDATE schedules SET next_run_at = $3::double precision, last_run_at = $4, "
        "state = CASE WHEN $3::double precision IS NULL THEN 'done' ELSE state END, "
        "pending_due_at = $2, pending_since = $4, pending_attempts = 1 "
        "WHERE id = $1 AND state = 'active' AND next_run_at = $2 "
        f"RETURNING {SCHEDULE_COLUMNS}",
        schedule_id,
        due_at,
        next_run_at,
        now,
    )
    return None if row is None else schedule_from(row)


async def unsettled(
    connection: asyncpg.Connection, claimed_before: float, limit: int
) -> list[Schedule]:
    found = await connection.fetch(statements.UNSETTLED.postgres, claimed_before, limit)
    return [schedule_from(row) for row in found]


async def reclaim(
    connection: asyncpg.Connection, schedule_id: int, due_at: float, since: float, now: float
) -> Schedule | None:
    row = await connection.fetchrow(
        statements.RECLAIM_SCHEDULE_RUN.postgres, schedule_id, due_at, since, now
    )
    return None if row is None else schedule_from(row)


async def settle(connection: asyncpg.Connection, schedule_id: int, due_at: float) -> bool:
    found = await connection.fetchval(statements.SETTLE_SCHEDULE_RUN.postgres, schedule_id, due_at)
    return found is not None


async def database_time(connection: asyncpg.Connection) -> float:
    """The server's clock, which every instance shares (not the transaction's start)."""
    value = await connection.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
    return float(value)
