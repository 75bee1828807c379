"""The SQL of scheduled work on SQLite.

Owns: the calls behind `add_schedule`, `schedules`, `cancel_schedule`, `due_schedules`,
`claim_schedule`, `unsettled_schedule_runs`, `reclaim_schedule_run` and `settle_schedule_run`,
as `Op`s the store's batcher runs (their statements are `storage.statements`, shared with
PostgreSQL, all but the claim's). A bounded add checks and inserts inside one transaction
(SQLite has one writer, so nothing interleaves); a claim is one conditional
`UPDATE ... RETURNING`.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from storage import statements
from storage.base import Schedule, TooManySchedules
from storage.batching import Op
from storage.rows import SCHEDULE_COLUMNS, schedule_from
from storage.sqlite_ops import Db, fetchall, fetchone

# (channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, max_active, now)
AddScheduleCall = tuple[str, str, str | None, str, float, str, str, int, float]


async def _add_schedule(db: Db, call: AddScheduleCall) -> Schedule:
    channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, max_active, now = call
    (count,) = await fetchone(db, statements.ACTIVE_SCHEDULES_HELD.sqlite, (channel_key,))
    if int(count) >= max_active:
        raise TooManySchedules(f"the channel has {int(count)} active schedules")
    row = await fetchone(
        db,
        statements.ADD_SCHEDULE.sqlite,
        (channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, now),
    )
    return schedule_from(row)


ADD_SCHEDULE: Op[Db, AddScheduleCall, Schedule] = Op("add_schedule", one=_add_schedule)


async def read_schedules(db: Db, channel_key: str) -> list[Schedule]:
    found = await fetchall(db, statements.SCHEDULES.sqlite, (channel_key,))
    return [schedule_from(row) for row in found]


async def read_due(db: Db, now: float, limit: int) -> list[Schedule]:
    found = await fetchall(db, statements.DUE.sqlite, (now, limit))
    return [schedule_from(row) for row in found]


async def _cancel(db: Db, call: tuple[str, int]) -> bool:
    found = await fetchall(db, statements.CANCEL_SCHEDULE.sqlite, call)
    return bool(found)


CANCEL_SCHEDULE: Op[Db, tuple[str, int], bool] = Op("cancel_schedule", one=_cancel, lone=_cancel)

# (schedule_id, due_at, next_run_at, now)
ClaimCall = tuple[int, float, float | None, float]


async def _claim(db: Db, call: ClaimCall) -> Schedule | None:
    schedule_id, due_at, next_run_at, now = call
    found = await fetchall(
        db,
        "UPDATE schedules SET next_run_at = ?, last_run_at = ?, "
        "state = CASE WHEN ? IS NULL THEN 'done' ELSE state END, "
        "pending_due_at = ?, pending_since = ?, pending_attempts = 1 "
        "WHERE id = ? AND state = 'active' AND next_run_at = ? "
        f"RETURNING {SCHEDULE_COLUMNS}",
        (next_run_at, now, next_run_at, due_at, now, schedule_id, due_at),
    )
    return schedule_from(found[0]) if found else None


CLAIM_SCHEDULE: Op[Db, ClaimCall, Schedule | None] = Op("claim_schedule", one=_claim, lone=_claim)


async def read_unsettled(db: Db, claimed_before: float, limit: int) -> list[Schedule]:
    found = await fetchall(db, statements.UNSETTLED.sqlite, (claimed_before, limit))
    return [schedule_from(row) for row in found]


# (schedule_id, due_at, since, now)
ReclaimCall = tuple[int, float, float, float]


async def _reclaim(db: Db, call: ReclaimCall) -> Schedule | None:
    found = await fetchall(db, statements.RECLAIM_SCHEDULE_RUN.sqlite, call)
    return schedule_from(found[0]) if found else None


RECLAIM_SCHEDULE_RUN: Op[Db, ReclaimCall, Schedule | None] = Op(
    "reclaim_schedule_run", one=_reclaim, lone=_reclaim
)


async def _settle(db: Db, call: tuple[int, float]) -> bool:
    found = await fetchall(db, statements.SETTLE_SCHEDULE_RUN.sqlite, call)
    return bool(found)


SETTLE_SCHEDULE_RUN: Op[Db, tuple[int, float], bool] = Op(
    "settle_schedule_run", one=_settle, lone=_settle
)
