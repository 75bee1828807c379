"""The console's reads and its two small writes, on SQLite.

Owns: `SqliteConsole` (a base of `SqliteStore`): the session secret kept once
(`console_secret`), one-time sign-in links (`add_console_link`, `use_console_link`: one
conditional statement, so a link signs in once), and the overview, channel and health reads
(`console_overview`, `console_channels`, `console_health`).

Scope filters: a platform is a range of channel keys (`slack:` ≤ key < `slack;`), so the
`runs_channel` and `usage_ledger_channel` indexes serve it.

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import json
from typing import Any

from storage.batching import Op
from storage.console_records import (
    ChannelActivity,
    ConsoleHealth,
    ConsoleOverview,
    DayCost,
    RecentError,
    RunningRun,
)
from storage.sqlite_connections import SqliteConnections
from storage.sqlite_ops import Db, fetchall, fetchone

MAX_RUNNING_SHOWN = 200


def scope_sql(column: str, platform: str | None, channel_key: str | None) -> tuple[str, list[Any]]:
    """` AND …` narrowing `column` (a channel key) to a platform and/or a channel."""
    sql, params = "", []
    if platform is not None:
        sql += f" AND {column} >= ? AND {column} < ?"
        params += [f"{platform}:", f"{platform};"]
    if channel_key is not None:
        sql += f" AND {column} = ?"
        params.append(channel_key)
    return sql, params


async def _secret(db: Db, candidate: str) -> str:
    await db.execute(
        "INSERT INTO console_state (key, value) VALUES ('session_secret', ?) "
        "ON CONFLICT (key) DO NOTHING",
        (candidate,),
    )
    row = await fetchone(db, "SELECT value FROM console_state WHERE key = 'session_secret'")
    return str(row[0])


async def _add_link(db: Db, call: tuple[str, str, float]) -> None:
    await db.execute(
        "INSERT INTO console_links (token_hash, person, expires_at) VALUES (?, ?, ?)", call
    )


async def _use_link(db: Db, call: tuple[str, float]) -> str | None:
    token_hash, now = call
    row = await fetchone(
        db,
        "UPDATE console_links SET used_at = ?2 WHERE token_hash = ?1 AND used_at IS NULL "
        "AND expires_at > ?2 RETURNING person",
        (token_hash, now),
    )
    return None if row is None else str(row[0])


SECRET: Op[Db, str, str] = Op("console_secret", one=_secret)
ADD_LINK: Op[Db, tuple[str, str, float], None] = Op("add_console_link", one=_add_link)
USE_LINK: Op[Db, tuple[str, float], str | None] = Op("use_console_link", one=_use_link)


async def _percentile(db: Db, where: str, params: list[Any], count: int, q: float) -> float | None:
    if count == 0:
        return None
    row = await fetchone(
        db,
        f"SELECT finished_at - started_at AS took FROM runs WHERE {where} "
        "ORDER BY took LIMIT 1 OFFSET ?",
        [*params, min(count - 1, int(q * count))],
    )
    return None if row is None else float(row[0])


async def read_overview(
    db: Db, since: float, platform: str | None, channel_key: str | None
) -> ConsoleOverview:
    scope, scoped = scope_sql("channel_key", platform, channel_key)
    runs_scope, runs_scoped = scope_sql("r.channel_key", platform, channel_key)
    counts = await fetchone(
        db,
        "SELECT COUNT(*), COALESCE(SUM(outcome = 'done'), 0), COALESCE(SUM(outcome = 'error'), 0), "
        "COALESCE(SUM(outcome IN ('interrupted', 'aborted')), 0), COUNT(DISTINCT user_id) "
        f"FROM runs WHERE started_at >= ?{scope}",
        [since, *scoped],
    )
    votes = await fetchone(
        db,
        "SELECT COALESCE(SUM(f.vote = 'up'), 0), COALESCE(SUM(f.vote = 'down'), 0) "
        f"FROM run_feedback f JOIN runs r ON r.id = f.run_id WHERE f.at >= ?{runs_scope}",
        [since, *runs_scoped],
    )
    daily = await fetchall(
        db,
        "SELECT strftime('%Y-%m-%d', at, 'unixepoch') AS day, channel_key, SUM(cost_usd) "
        f"FROM usage_ledger WHERE at >= ?{scope} GROUP BY day, channel_key ORDER BY day",
        [since, *scoped],
    )
    done = f"outcome = 'done' AND finished_at IS NOT NULL AND started_at >= ?{scope}"
    answers = int(counts[1])
    days = tuple(DayCost(str(d), str(c or "?"), float(cost)) for d, c, cost in daily)
    return ConsoleOverview(
        runs=int(counts[0]),
        answers=answers,
        failures=int(counts[2]),
        interruptions=int(counts[3]),
        people=int(counts[4]),
        votes_up=int(votes[0]),
        votes_down=int(votes[1]),
        cost_usd=sum(day.cost_usd for day in days),
        answer_p50_s=await _percentile(db, done, [since, *scoped], answers, 0.5),
        answer_p95_s=await _percentile(db, done, [since, *scoped], answers, 0.95),
        daily_cost=days,
    )


async def read_channels(db: Db, since: float, limit: int) -> list[ChannelActivity]:
    conversations = await fetchall(
        db, "SELECT channel_key, COUNT(*), MAX(updated_at) FROM conversations GROUP BY channel_key"
    )
    runs = await fetchall(
        db,
        "SELECT channel_key, COUNT(*) FROM runs WHERE started_at >= ? GROUP BY channel_key",
        (since,),
    )
    costs = await fetchall(
        db,
        "SELECT channel_key, SUM(cost_usd) FROM usage_ledger WHERE at >= ? GROUP BY channel_key",
        (since,),
    )
    configured = await fetchall(db, "SELECT channel_key, updated_at FROM channel_config")
    return merge_channels(conversations, runs, costs, configured, limit)


def merge_channels(
    conversations: list[Any], runs: list[Any], costs: list[Any], configured: list[Any], limit: int
) -> list[ChannelActivity]:
    """One entry per channel any of the reads names, the most recently active first."""
    by_key: dict[str, dict[str, Any]] = {}

    def entry(key: Any) -> dict[str, Any]:
        return by_key.setdefault(
            str(key), {"conversations": 0, "runs": 0, "cost": 0.0, "last": None}
        )

    for key, count, last in conversations:
        entry(key).update(conversations=int(count), last=float(last))
    for key, count in runs:
        if key is not None:
            entry(key)["runs"] = int(count)
    for key, cost in costs:
        if key is not None:
            entry(key)["cost"] = float(cost or 0)
    for key, updated in configured:
        found = entry(key)
        found["last"] = max(found["last"] or 0.0, float(updated))
    ordered = sorted(by_key.items(), key=lambda item: (-(item[1]["last"] or 0.0), item[0]))
    return [
        ChannelActivity(key, v["conversations"], v["runs"], v["cost"], v["last"])
        for key, v in ordered[:limit]
    ]


async def read_health(db: Db, errors_limit: int) -> ConsoleHealth:
    inbox = await fetchone(
        db, "SELECT COUNT(*), MIN(received_at) FROM inbox WHERE state = 'pending'"
    )
    running = await fetchall(
        db,
        "SELECT r.id, c.key, r.channel_key, r.user_id, r.model, r.started_at, r.owner "
        "FROM runs r JOIN conversations c ON c.id = r.conversation_id "
        "WHERE r.outcome = 'running' ORDER BY r.started_at LIMIT ?",
        (MAX_RUNNING_SHOWN,),
    )
    errors = await fetchall(
        db,
        "SELECT r.id, c.key, r.channel_key, r.finished_at, COALESCE(r.error, '') "
        "FROM runs r JOIN conversations c ON c.id = r.conversation_id "
        "WHERE r.outcome = 'error' ORDER BY r.finished_at DESC LIMIT ?",
        (errors_limit,),
    )
    pages = await fetchone(
        db, "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size"
    )
    return ConsoleHealth(
        inbox_depth=int(inbox[0]),
        oldest_pending_at=None if inbox[1] is None else float(inbox[1]),
        database_bytes=int(pages[0]),
        running=tuple(
            RunningRun(int(i), str(k), ch, u, m, float(s), _owner(o))
            for i, k, ch, u, m, s, o in running
        ),
        leases=(),
        recent_errors=tuple(
            RecentError(int(i), str(k), ch, None if f is None else float(f), str(e)[:500])
            for i, k, ch, f, e in errors
        ),
    )


def _owner(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        loaded = json.loads(value or "{}")
    except (TypeError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


class SqliteConsole(SqliteConnections):
    """The console's calls on SQLite (a base of `SqliteStore`)."""

    async def console_secret(self, candidate: str) -> str:
        return await self._write(SECRET, candidate)

    async def add_console_link(self, token_hash: str, person: str, *, expires_at: float) -> None:
        await self._write(ADD_LINK, (token_hash, person, expires_at))

    async def use_console_link(self, token_hash: str, *, now: float) -> str | None:
        return await self._write(USE_LINK, (token_hash, now))

    async def console_overview(
        self, *, since: float, platform: str | None = None, channel_key: str | None = None
    ) -> ConsoleOverview:
        return await self._read(lambda db: read_overview(db, since, platform, channel_key))

    async def console_channels(self, *, since: float, limit: int) -> list[ChannelActivity]:
        return await self._read(lambda db: read_channels(db, since, limit))

    async def console_health(self, *, errors_limit: int) -> ConsoleHealth:
        return await self._read(lambda db: read_health(db, errors_limit))
