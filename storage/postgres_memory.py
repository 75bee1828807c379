"""The SQL of a channel's memory and of scheduled work on PostgreSQL.

Owns: the statements behind the memory and schedule methods of `PostgresStore`, each run by
the store in one transaction on one pooled connection. Bounded adds take a transaction-scoped
advisory lock on the channel first, so concurrent adds from any number of instances cannot
pass the bound together; a claim is one conditional `UPDATE ... RETURNING` (the second of two
racing instances waits for the first's row lock, then finds the row no longer due).

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import asyncpg

from storage.base import MemoryFull, MemoryNote, Schedule, TooManySchedules
from storage.memory_rows import NOTE_COLUMNS, SCHEDULE_COLUMNS, note_from, schedule_from

# The first key of the advisory locks taken here ("Tmem"): apart from anyone else's.
_LOCK_CLASS = 0x546D656D


async def _lock_channel(connection: asyncpg.Connection, channel_key: str) -> None:
    await connection.execute(
        "SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _LOCK_CLASS, channel_key
    )


async def notes(connection: asyncpg.Connection, channel_key: str) -> list[MemoryNote]:
    found = await connection.fetch(
        f"SELECT {NOTE_COLUMNS} FROM channel_memory WHERE channel_key = $1 ORDER BY id",
        channel_key,
    )
    return [note_from(row) for row in found]


async def add_note(
    connection: asyncpg.Connection,
    channel_key: str,
    text: str,
    by: str | None,
    max_notes: int,
    max_chars: int,
    now: float,
) -> MemoryNote:
    """In a transaction: lock the channel, check the bound, insert."""
    await _lock_channel(connection, channel_key)
    count, chars = await connection.fetchrow(
        "SELECT count(*), COALESCE(SUM(length(text)), 0) FROM channel_memory "
        "WHERE channel_key = $1",
        channel_key,
    )
    if int(count) + 1 > max_notes or int(chars) + len(text) > max_chars:
        raise MemoryFull(f"the channel's memory holds {int(count)} notes, {int(chars)} characters")
    row = await connection.fetchrow(
        "INSERT INTO channel_memory (channel_key, text, created_by, created_at) "
        f"VALUES ($1, $2, $3, $4) RETURNING {NOTE_COLUMNS}",
        channel_key,
        text,
        by,
        now,
    )
    return note_from(row)


async def forget_note(connection: asyncpg.Connection, channel_key: str, note_id: int) -> bool:
    found = await connection.fetchval(
        "DELETE FROM channel_memory WHERE channel_key = $1 AND id = $2 RETURNING id",
        channel_key,
        note_id,
    )
    return found is not None


async def clear(connection: asyncpg.Connection, channel_key: str) -> int:
    found = await connection.fetch(
        "DELETE FROM channel_memory WHERE channel_key = $1 RETURNING id", channel_key
    )
    return len(found)


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
    await _lock_channel(connection, channel_key)
    count = await connection.fetchval(
        "SELECT count(*) FROM schedules WHERE channel_key = $1 AND state = 'active'",
        channel_key,
    )
    if int(count) >= max_active:
        raise TooManySchedules(f"the channel has {int(count)} active schedules")
    row = await connection.fetchrow(
        "INSERT INTO schedules (channel_key, prompt, cron, timezone, next_run_at, created_by, "
        "created_by_name, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
        f"RETURNING {SCHEDULE_COLUMNS}",
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
    found = await connection.fetch(
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE channel_key = $1 "
        "AND state = 'active' ORDER BY id",
        channel_key,
    )
    return [schedule_from(row) for row in found]


async def due(connection: asyncpg.Connection, now: float, limit: int) -> list[Schedule]:
    found = await connection.fetch(
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE state = 'active' "
        "AND next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2",
        now,
        limit,
    )
    return [schedule_from(row) for row in found]


async def cancel(connection: asyncpg.Connection, channel_key: str, schedule_id: int) -> bool:
    found = await connection.fetchval(
        "UPDATE schedules SET state = 'cancelled', next_run_at = NULL, pending_due_at = NULL, "
        "pending_since = NULL WHERE channel_key = $1 AND id = $2 AND state = 'active' "
        "RETURNING id",
        channel_key,
        schedule_id,
    )
    return found is not None


async def claim(
    connection: asyncpg.Connection,
    schedule_id: int,
    due_at: float,
    next_run_at: float | None,
    now: float,
) -> Schedule | None:
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
    found = await connection.fetch(
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE pending_due_at IS NOT NULL "
        "AND pending_since <= $1 AND state != 'cancelled' ORDER BY pending_since, id LIMIT $2",
        claimed_before,
        limit,
    )
    return [schedule_from(row) for row in found]


async def reclaim(
    connection: asyncpg.Connection, schedule_id: int, due_at: float, since: float, now: float
) -> Schedule | None:
    row = await connection.fetchrow(
        "UPDATE schedules SET pending_since = $4, pending_attempts = pending_attempts + 1 "
        "WHERE id = $1 AND pending_due_at = $2 AND pending_since = $3 AND state != 'cancelled' "
        f"RETURNING {SCHEDULE_COLUMNS}",
        schedule_id,
        due_at,
        since,
        now,
    )
    return None if row is None else schedule_from(row)


async def settle(connection: asyncpg.Connection, schedule_id: int, due_at: float) -> bool:
    found = await connection.fetchval(
        "UPDATE schedules SET pending_due_at = NULL, pending_since = NULL, pending_attempts = 0 "
        "WHERE id = $1 AND pending_due_at = $2 RETURNING id",
        schedule_id,
        due_at,
    )
    return found is not None
