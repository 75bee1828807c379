"""The SQL of a channel's stored configuration, on PostgreSQL.

Owns: the calls behind `get_channel_config` and `set_channel_config` (an upsert: the
configuration replaced wholesale, with who changed it and when), each run by `PostgresStore`
on one pooled connection.

Must not: acquire connections or open transactions; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from storage import rows


async def get(connection: asyncpg.Connection, channel_key: str) -> dict[str, Any] | None:
    text = await connection.fetchval(
        "SELECT config FROM channel_config WHERE channel_key = $1", channel_key
    )
    return None if text is None else rows.load_json_object(str(text))


async def replace(
    connection: asyncpg.Connection, channel_key: str, config_json: str, by: str | None, now: float
) -> None:
    await connection.execute(
        "INSERT INTO channel_config (channel_key, config, updated_by, updated_at) "
        "VALUES ($1, $2::jsonb, $3, $4) ON CONFLICT (channel_key) DO UPDATE SET "
        "config = EXCLUDED.config, updated_by = EXCLUDED.updated_by, "
        "updated_at = EXCLUDED.updated_at",
        channel_key,
        config_json,
        by,
        now,
    )
