"""The SQL of the usage ledger and of feedback on runs, on SQLite.

Owns: the calls behind `record_usage` and `set_run_feedback` (as `Op`s the store's batcher
runs), the reads behind `usage_since` and `usage_summary`, and the ledger's insert, which an
append charged with a reply's usage shares (`sqlite_conversations`).

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.messages import Usage
from storage import rows
from storage.batching import Op
from storage.records import FeedbackTally, UsageSummary, Vote
from storage.sqlite_ops import Db, fetchall, fetchone, json_list

LEDGER_INSERT = (
    "INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
    "SELECT id, conversation_id, user_id, channel_key, COALESCE(?, model), ?, ?, ?, ?, ?, ? "
    "FROM runs WHERE id = ?"
)


def ledger_row(run_id: int | None, usage: Usage, model: str | None, now: float) -> tuple[Any, ...]:
    return (
        model,
        now,
        usage.input,
        usage.output,
        usage.cache_read,
        usage.cache_write,
        usage.cost,
        run_id,
    )


async def known_runs(db: Db, run_ids: set[int]) -> set[int]:
    if not run_ids:
        return set()
    found = await fetchall(
        db,
        "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?))",
        (json_list(run_ids),),
    )
    return {int(row[0]) for row in found}


@dataclass(frozen=True, slots=True)
class UsageCall:
    run_id: int
    usage: Usage
    model: str | None
    now: float


async def _usage_lone(db: Db, call: UsageCall) -> None:
    cursor = await db.execute(
        LEDGER_INSERT, ledger_row(call.run_id, call.usage, call.model, call.now)
    )
    if cursor.rowcount != 1:
        raise KeyError(f"no run with id {call.run_id}")


async def _usage_many(db: Db, calls: list[UsageCall]) -> list[Exception | None]:
    runs = await known_runs(db, {c.run_id for c in calls})
    known = [c for c in calls if c.run_id in runs]
    if known:
        await db.executemany(
            LEDGER_INSERT, [ledger_row(c.run_id, c.usage, c.model, c.now) for c in known]
        )
    return [None if c.run_id in runs else KeyError(f"no run with id {c.run_id}") for c in calls]


RECORD_USAGE: Op[Db, UsageCall, None] = Op(
    "record_usage", one=_usage_lone, lone=_usage_lone, many=_usage_many
)


async def read_usage_since(
    db: Db, since: float, conversation_id: int | None, user_id: str | None, channel_key: str | None
) -> Usage:
    """Total usage recorded at or after `since`, narrowed by every filter not None."""
    filters = {
        "conversation_id": conversation_id,
        "user_id": user_id,
        "channel_key": channel_key,
    }
    where = ["at >= ?"]
    params: list[Any] = [since]
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE {' AND '.join(where)}"
    return rows.usage_of(await fetchone(db, sql, params))


async def read_usage_summary(
    db: Db, since: float, conversation_id: int | None, user_id: str | None, channel_key: str | None
) -> UsageSummary:
    """Usage, runs started and votes cast at or after `since`, narrowed by every filter not
    None (a vote is in scope when its run is), read in one statement (one snapshot)."""
    filters = {
        "conversation_id": conversation_id,
        "user_id": user_id,
        "channel_key": channel_key,
    }
    given = {column: value for column, value in filters.items() if value is not None}
    params = [since, *given.values()]

    def scope(table: str) -> str:
        return "".join(f" AND {table}.{column} = ?" for column in given)

    sql = (
        f"SELECT * FROM (SELECT {rows.USAGE_SUMS} FROM usage_ledger "
        f"WHERE at >= ?{scope('usage_ledger')}), "
        f"(SELECT COUNT(*) FROM runs WHERE started_at >= ?{scope('runs')}), "
        "(SELECT COALESCE(SUM(f.vote = 'up'), 0), COALESCE(SUM(f.vote = 'down'), 0) "
        f"FROM run_feedback f JOIN runs ON runs.id = f.run_id WHERE f.at >= ?{scope('runs')})"
    )
    row = await fetchone(db, sql, params * 3)
    return UsageSummary(
        usage=rows.usage_of(row[:5]),
        runs=int(row[5]),
        votes_up=int(row[6]),
        votes_down=int(row[7]),
    )


# run id, user id, vote, now, and the channel the run must be of (None: any).
FeedbackCall = tuple[int, str, Vote | None, float, str | None]


async def _feedback(db: Db, call: FeedbackCall) -> FeedbackTally:
    run_id, user_id, vote, now, channel_key = call
    found = await fetchone(
        db,
        "SELECT 1 FROM runs WHERE id = ? AND (? IS NULL OR channel_key = ?)",
        (run_id, channel_key, channel_key),
    )
    if found is None:
        raise KeyError(f"no run {run_id}" + (f" in {channel_key}" if channel_key else ""))
    if vote is None:
        await db.execute(
            "DELETE FROM run_feedback WHERE run_id = ? AND user_id = ?", (run_id, user_id)
        )
    else:
        await db.execute(
            "INSERT INTO run_feedback (run_id, user_id, vote, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (run_id, user_id) DO UPDATE SET vote = excluded.vote, at = excluded.at",
            (run_id, user_id, vote, now),
        )
    up, down = await fetchone(
        db,
        "SELECT COALESCE(SUM(vote = 'up'), 0), COALESCE(SUM(vote = 'down'), 0) "
        "FROM run_feedback WHERE run_id = ?",
        (run_id,),
    )
    return FeedbackTally(up=int(up), down=int(down))


FEEDBACK: Op[Db, FeedbackCall, FeedbackTally] = Op("set_run_feedback", one=_feedback)
