"""The SQL of a channel's memory on PostgreSQL, and the channel lock its bounded adds take.

Owns: the calls behind the memory methods of `PostgresStore` (their statements are
`storage.statements`, shared with SQLite), each run by the store in one transaction on one
pooled connection; `lock_channel`, the transaction-scoped advisory lock a bounded add (a note
here, a schedule in `postgres_schedules`) takes on its channel first, so concurrent adds from
any number of instances cannot pass the bound together.

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import asyncpg

from storage import statements
from storage.base import MemoryFull, MemoryNote
from storage.rows import note_from

# The first key of the advisory locks taken here ("Tmem"): apart from anyone else's.
_LOCK_CLASS = 0x546D656D


async def lock_channel(connection: asyncpg.Connection, channel_key: str) -> None:
    """Until the transaction ends: one bounded add at a time in the channel."""
    await connection.execute(
        "SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _LOCK_CLASS, channel_key
    )


async def notes(connection: asyncpg.Connection, channel_key: str) -> list[MemoryNote]:
    found = await connection.fetch(statements.NOTES.postgres, channel_key)
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
    await lock_channel(connection, channel_key)
    count, chars = await connection.fetchrow(statements.NOTES_HELD.postgres, channel_key)
    if int(count) + 1 > max_notes or int(chars) + len(text) > max_chars:
        raise MemoryFull(f"the channel's memory holds {int(count)} notes, {int(chars)} characters")
    row = await connection.fetchrow(statements.ADD_NOTE.postgres, channel_key, text, by, now)
    return note_from(row)


async def forget_note(connection: asyncpg.Connection, channel_key: str, note_id: int) -> bool:
    found = await connection.fetchval(statements.FORGET_NOTE.postgres, channel_key, note_id)
    return found is not None


async def clear(connection: asyncpg.Connection, channel_key: str) -> int:
    found = await connection.fetch(statements.CLEAR_MEMORY.postgres, channel_key)
    return len(found)
