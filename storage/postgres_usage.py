"""The SQL of the usage ledger and of feedback on runs, on PostgreSQL.

Owns: the calls behind `record_usage`, `usage_since`, `usage_summary` (one statement, one
snapshot) and `set_run_feedback` (the run's row locked, so votes on one run are counted one
after another), each run by `PostgresStore` on one pooled connection.

Must not: acquire connections or open transactions; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from core.messages import Usage
from storage import rows
from storage.records import FeedbackTally, UsageSummary, Vote


async def record(
    connection: asyncpg.Connection, run_id: int, usage: Usage, model: str | None, now: float
) -> None:
    added = await connection.fetchval(
        "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at, "
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        "SELECT id, conversation_id, user_id, channel_key, COALESCE($1, model), $2, $3, $4, $5, "
        "$6, $7 FROM runs WHERE id = $8 RETURNING true",
        model,
        now,
        usage.input,
        usage.output,
        usage.cache_read,
        usage.cache_write,
        usage.cost,
        run_id,
    )
    if added is None:
        raise KeyError(f"no run with id {run_id}")


async def since(
    connection: asyncpg.Connection,
    since: float,
    conversation_id: int | None,
    user_id: str | None,
    channel_key: str | None,
) -> Usage:
    """Total usage recorded at or after `since`, narrowed by every filter not None."""
    filters = {
        "conversation_id": conversation_id,
        "user_id": user_id,
        "channel_key": channel_key,
    }
    where = ["at >= $1"]
    params: list[Any] = [since]
    for column, value in filters.items():
        if value is not None:
            params.append(value)
            where.append(f"{column} = ${len(params)}")
    sql = f"SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}"
    row = await connection.fetchrow(sql, *params)
    assert row is not None
    return rows.usage_of(row)


async def summary(
    connection: asyncpg.Connection,
    since: float,
    conversation_id: int | None,
    user_id: str | None,
    channel_key: str | None,
) -> UsageSummary:
    """Usage, runs started and votes cast at or after `since`, narrowed by every filter not
    None (a vote is in scope when its run is): one statement, one snapshot."""
    filters = {
        "conversation_id": conversation_id,
        "user_id": user_id,
        "channel_key": channel_key,
    }
    given = {column: value for column, value in filters.items() if value is not None}
    params: list[Any] = [since, *given.values()]

    def scope(table: str) -> str:
        return "".join(f" AND {table}.{column} = ${n}" for n, column in enumerate(given, 2))

    sql = (
        f"SELECT l.*, r.n, v.up, v.down FROM "
        f"(SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE at >= $1"
        f"{scope('usage_ledger')}) AS l, "
        f"(SELECT count(*) AS n FROM runs WHERE started_at >= $1{scope('runs')}) AS r, "
        "(SELECT count(*) FILTER (WHERE f.vote = 'up') AS up, "
        "count(*) FILTER (WHERE f.vote = 'down') AS down "
        f"FROM run_feedback f JOIN runs ON runs.id = f.run_id WHERE f.at >= $1"
        f"{scope('runs')}) AS v"
    )
    row = await connection.fetchrow(sql, *params)
    assert row is not None
    return UsageSummary(
        usage=rows.usage_of(row[:5]),
        runs=int(row[5]),
        votes_up=int(row[6]),
        votes_down=int(row[7]),
    )


async def set_feedback(
    connection: asyncpg.Connection,
    run_id: int,
    user_id: str,
    vote: Vote | None,
    channel_key: str | None,
    now: float,
) -> FeedbackTally:
    """In a transaction: the vote, then the run's tally."""
    # Locks the run's row: votes on one run are counted one after another.
    if (
        await connection.fetchval(
            "SELECT true FROM runs WHERE id = $1 "
            "AND ($2::text IS NULL OR channel_key = $2) FOR KEY SHARE",
            run_id,
            channel_key,
        )
        is None
    ):
        raise KeyError(f"no run {run_id}" + (f" in {channel_key}" if channel_key else ""))
    if vote is None:
        await connection.execute(
            "DELETE FROM run_feedback WHERE run_id = $1 AND user_id = $2", run_id, user_id
        )
    else:
        await connection.execute(
            "INSERT INTO run_feedback (run_id, user_id, vote, at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (run_id, user_id) DO UPDATE SET vote = EXCLUDED.vote, "
            "at = EXCLUDED.at",
            run_id,
            user_id,
            vote,
            now,
        )
    tally = await connection.fetchrow(
        "SELECT count(*) FILTER (WHERE vote = 'up'), count(*) FILTER (WHERE vote = 'down') "
        "FROM run_feedback WHERE run_id = $1",
        run_id,
    )
    assert tally is not None
    return FeedbackTally(up=int(tally[0]), down=int(tally[1]))
