"""The console's reads and its two small writes, on PostgreSQL (as `storage.sqlite_console`).

Owns: `PostgresConsole` (a base of `PostgresStore`): the session secret kept once for every
instance (`console_secret`: insert if absent, then read, one statement), one-time links (one
conditional UPDATE: of several instances, one signs in), the overview (percentiles with
`percentile_cont`), channels, and health (leases by holder, the database's size).

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import asyncpg

from storage.console_records import (
    ChannelActivity,
    ConsoleHealth,
    ConsoleOverview,
    DayCost,
    LeaseHolder,
    RecentError,
    RunningRun,
)
from storage.postgres_connections import PostgresConnections
from storage.rows import load_json_object
from storage.sqlite_console import MAX_RUNNING_SHOWN, merge_channels

# $1 since, $2 platform's first key, $3 the key after its last, $4 channel key (NULLs: any).
_SCOPE = " AND ($2::text IS NULL OR {c} >= $2 AND {c} < $3) AND ($4::text IS NULL OR {c} = $4)"


def _scope(column: str) -> str:
    return _SCOPE.format(c=column)


_RUNS = (
    "SELECT COUNT(*), COUNT(*) FILTER (WHERE outcome = 'done'), "
    "COUNT(*) FILTER (WHERE outcome = 'error'), "
    "COUNT(*) FILTER (WHERE outcome IN ('interrupted', 'aborted')), COUNT(DISTINCT user_id), "
    "percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - started_at) "
    "FILTER (WHERE outcome = 'done' AND finished_at IS NOT NULL), "
    "percentile_cont(0.95) WITHIN GROUP (ORDER BY finished_at - started_at) "
    "FILTER (WHERE outcome = 'done' AND finished_at IS NOT NULL) "
    f"FROM runs WHERE started_at >= $1{_scope('channel_key')}"
)
_VOTES = (
    "SELECT COUNT(*) FILTER (WHERE f.vote = 'up'), COUNT(*) FILTER (WHERE f.vote = 'down') "
    f"FROM run_feedback f JOIN runs r ON r.id = f.run_id WHERE f.at >= $1{_scope('r.channel_key')}"
)
_DAILY = (
    "SELECT to_char(to_timestamp(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, channel_key, "
    f"SUM(cost_usd) FROM usage_ledger WHERE at >= $1{_scope('channel_key')} "
    "GROUP BY day, channel_key ORDER BY day"
)


async def read_overview(
    connection: asyncpg.Connection, since: float, platform: str | None, channel_key: str | None
) -> ConsoleOverview:
    low, high = (f"{platform}:", f"{platform};") if platform is not None else (None, None)
    args = (since, low, high, channel_key)
    runs = await connection.fetchrow(_RUNS, *args)
    votes = await connection.fetchrow(_VOTES, *args)
    daily = await connection.fetch(_DAILY, *args)
    days = tuple(DayCost(str(d), str(c or "?"), float(cost)) for d, c, cost in daily)
    return ConsoleOverview(
        runs=int(runs[0]),
        answers=int(runs[1]),
        failures=int(runs[2]),
        interruptions=int(runs[3]),
        people=int(runs[4]),
        votes_up=int(votes[0]),
        votes_down=int(votes[1]),
        cost_usd=sum(day.cost_usd for day in days),
        answer_p50_s=None if runs[5] is None else float(runs[5]),
        answer_p95_s=None if runs[6] is None else float(runs[6]),
        daily_cost=days,
    )


async def read_channels(
    connection: asyncpg.Connection, since: float, limit: int
) -> list[ChannelActivity]:
    conversations = await connection.fetch(
        "SELECT channel_key, COUNT(*), MAX(updated_at) FROM conversations GROUP BY channel_key"
    )
    runs = await connection.fetch(
        "SELECT channel_key, COUNT(*) FROM runs WHERE started_at >= $1 GROUP BY channel_key",
        since,
    )
    costs = await connection.fetch(
        "SELECT channel_key, SUM(cost_usd) FROM usage_ledger WHERE at >= $1 GROUP BY channel_key",
        since,
    )
    configured = await connection.fetch("SELECT channel_key, updated_at FROM channel_config")
    return merge_channels(
        [tuple(r) for r in conversations],
        [tuple(r) for r in runs],
        [tuple(r) for r in costs],
        [tuple(r) for r in configured],
        limit,
    )


async def read_health(connection: asyncpg.Connection, errors_limit: int) -> ConsoleHealth:
    inbox = await connection.fetchrow(
        "SELECT COUNT(*), MIN(received_at) FROM inbox WHERE state = 'pending'"
    )
    running = await connection.fetch(
        "SELECT r.id, c.key, r.channel_key, r.user_id, r.model, r.started_at, r.owner::text "
        "FROM runs r JOIN conversations c ON c.id = r.conversation_id "
        "WHERE r.outcome = 'running' ORDER BY r.started_at LIMIT $1",
        MAX_RUNNING_SHOWN,
    )
    errors = await connection.fetch(
        "SELECT r.id, c.key, r.channel_key, r.finished_at, COALESCE(r.error, '') "
        "FROM runs r JOIN conversations c ON c.id = r.conversation_id "
        "WHERE r.outcome = 'error' ORDER BY r.finished_at DESC LIMIT $1",
        errors_limit,
    )
    leases = await connection.fetch(
        "SELECT holder, COUNT(*), MAX(extract(epoch FROM expires_at))::float8 "
        "FROM conversation_leases WHERE expires_at > clock_timestamp() "
        "GROUP BY holder ORDER BY holder LIMIT 100"
    )
    size = await connection.fetchval("SELECT pg_database_size(current_database())")
    return ConsoleHealth(
        inbox_depth=int(inbox[0]),
        oldest_pending_at=None if inbox[1] is None else float(inbox[1]),
        database_bytes=int(size),
        running=tuple(
            RunningRun(int(i), str(k), ch, u, m, float(s), load_json_object(o))
            for i, k, ch, u, m, s, o in running
        ),
        leases=tuple(LeaseHolder(str(h), int(n), float(e)) for h, n, e in leases),
        recent_errors=tuple(
            RecentError(int(i), str(k), ch, None if f is None else float(f), str(e)[:500])
            for i, k, ch, f, e in errors
        ),
    )


class PostgresConsole(PostgresConnections):
    """The console's calls on PostgreSQL (a base of `PostgresStore`)."""

    async def console_secret(self, candidate: str) -> str:
        found = await self._call(
            lambda connection: connection.fetchval(
                "WITH added AS (INSERT INTO console_state (key, value) "
                "VALUES ('session_secret', $1) ON CONFLICT (key) DO NOTHING RETURNING value) "
                "SELECT value FROM added UNION ALL "
                "SELECT value FROM console_state WHERE key = 'session_secret' LIMIT 1",
                candidate,
            )
        )
        return str(found)

    async def add_console_link(self, token_hash: str, person: str, *, expires_at: float) -> None:
        await self._call(
            lambda connection: connection.execute(
                "INSERT INTO console_links (token_hash, person, expires_at) VALUES ($1, $2, $3)",
                token_hash,
                person,
                expires_at,
            )
        )

    async def use_console_link(self, token_hash: str, *, now: float) -> str | None:
        found = await self._call(
            lambda connection: connection.fetchval(
                "UPDATE console_links SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL "
                "AND expires_at > $2 RETURNING person",
                token_hash,
                now,
            )
        )
        return None if found is None else str(found)

    async def console_overview(
        self, *, since: float, platform: str | None = None, channel_key: str | None = None
    ) -> ConsoleOverview:
        return await self._call(
            lambda connection: read_overview(connection, since, platform, channel_key)
        )

    async def console_channels(self, *, since: float, limit: int) -> list[ChannelActivity]:
        return await self._call(lambda connection: read_channels(connection, since, limit))

    async def console_health(self, *, errors_limit: int) -> ConsoleHealth:
        return await self._call(lambda connection: read_health(connection, errors_limit))


__all__ = ["PostgresConsole", "read_overview"]
