"""The SQL of a channel's memory and of scheduled work on SQLite.

Owns: the statements behind `memory_notes`, `add_memory_note`, `forget_memory_note`,
`clear_memory`, `add_schedule`, `schedules`, `cancel_schedule`, `due_schedules` and
`claim_schedule`, as `Op`s the store's batcher runs. Bounded adds check and insert inside one
transaction (SQLite has one writer, so nothing interleaves); a claim is one conditional
`UPDATE ... RETURNING`.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from storage.base import MemoryFull, MemoryNote, Schedule, TooManySchedules
from storage.batching import Op
from storage.memory_rows import NOTE_COLUMNS, SCHEDULE_COLUMNS, note_from, schedule_from
from storage.sqlite_ops import Db, fetchall, fetchone


async def read_notes(db: Db, channel_key: str) -> list[MemoryNote]:
    found = await fetchall(
        db,
        f"SELECT {NOTE_COLUMNS} FROM channel_memory WHERE channel_key = ? ORDER BY id",
        (channel_key,),
    )
    return [note_from(row) for row in found]


# (channel_key, text, by, max_notes, max_chars, now)
AddNoteCall = tuple[str, str, str | None, int, int, float]


async def _add_note(db: Db, call: AddNoteCall) -> MemoryNote:
    channel_key, text, by, max_notes, max_chars, now = call
    count, chars = await fetchone(
        db,
        "SELECT count(*), COALESCE(SUM(length(text)), 0) FROM channel_memory WHERE channel_key = ?",
        (channel_key,),
    )
    if int(count) + 1 > max_notes or int(chars) + len(text) > max_chars:
        raise MemoryFull(f"the channel's memory holds {int(count)} notes, {int(chars)} characters")
    row = await fetchone(
        db,
        "INSERT INTO channel_memory (channel_key, text, created_by, created_at) "
        f"VALUES (?, ?, ?, ?) RETURNING {NOTE_COLUMNS}",
        (channel_key, text, by, now),
    )
    return note_from(row)


ADD_NOTE: Op[Db, AddNoteCall, MemoryNote] = Op("add_memory_note", one=_add_note)


async def _forget_note(db: Db, call: tuple[str, int]) -> bool:
    found = await fetchall(
        db, "DELETE FROM channel_memory WHERE channel_key = ? AND id = ? RETURNING id", call
    )
    return bool(found)


FORGET_NOTE: Op[Db, tuple[str, int], bool] = Op(
    "forget_memory_note", one=_forget_note, lone=_forget_note
)


async def _clear(db: Db, channel_key: str) -> int:
    found = await fetchall(
        db, "DELETE FROM channel_memory WHERE channel_key = ? RETURNING id", (channel_key,)
    )
    return len(found)


CLEAR_MEMORY: Op[Db, str, int] = Op("clear_memory", one=_clear, lone=_clear)


# (channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, max_active, now)
AddScheduleCall = tuple[str, str, str | None, str, float, str, str, int, float]


async def _add_schedule(db: Db, call: AddScheduleCall) -> Schedule:
    channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, max_active, now = call
    (count,) = await fetchone(
        db,
        "SELECT count(*) FROM schedules WHERE channel_key = ? AND state = 'active'",
        (channel_key,),
    )
    if int(count) >= max_active:
        raise TooManySchedules(f"the channel has {int(count)} active schedules")
    row = await fetchone(
        db,
        "INSERT INTO schedules (channel_key, prompt, cron, timezone, next_run_at, created_by, "
        f"created_by_name, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING "
        f"{SCHEDULE_COLUMNS}",
        (channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, now),
    )
    return schedule_from(row)


ADD_SCHEDULE: Op[Db, AddScheduleCall, Schedule] = Op("add_schedule", one=_add_schedule)


async def read_schedules(db: Db, channel_key: str) -> list[Schedule]:
    found = await fetchall(
        db,
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE channel_key = ? AND state = 'active' "
        "ORDER BY id",
        (channel_key,),
    )
    return [schedule_from(row) for row in found]


async def read_due(db: Db, now: float, limit: int) -> list[Schedule]:
    found = await fetchall(
        db,
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE state = 'active' "
        "AND next_run_at <= ? ORDER BY next_run_at, id LIMIT ?",
        (now, limit),
    )
    return [schedule_from(row) for row in found]


async def _cancel(db: Db, call: tuple[str, int]) -> bool:
    found = await fetchall(
        db,
        "UPDATE schedules SET state = 'cancelled', next_run_at = NULL, pending_due_at = NULL, "
        "pending_since = NULL WHERE channel_key = ? AND id = ? AND state = 'active' RETURNING id",
        call,
    )
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
    found = await fetchall(
        db,
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE pending_due_at IS NOT NULL "
        "AND pending_since <= ? AND state != 'cancelled' ORDER BY pending_since, id LIMIT ?",
        (claimed_before, limit),
    )
    return [schedule_from(row) for row in found]


# (schedule_id, due_at, since, now)
ReclaimCall = tuple[int, float, float, float]


async def _reclaim(db: Db, call: ReclaimCall) -> Schedule | None:
    schedule_id, due_at, since, now = call
    found = await fetchall(
        db,
        "UPDATE schedules SET pending_since = ?, pending_attempts = pending_attempts + 1 "
        "WHERE id = ? AND pending_due_at = ? AND pending_since = ? AND state != 'cancelled' "
        f"RETURNING {SCHEDULE_COLUMNS}",
        (now, schedule_id, due_at, since),
    )
    return schedule_from(found[0]) if found else None


RECLAIM_SCHEDULE_RUN: Op[Db, ReclaimCall, Schedule | None] = Op(
    "reclaim_schedule_run", one=_reclaim, lone=_reclaim
)


async def _settle(db: Db, call: tuple[int, float]) -> bool:
    found = await fetchall(
        db,
        "UPDATE schedules SET pending_due_at = NULL, pending_since = NULL, pending_attempts = 0 "
        "WHERE id = ? AND pending_due_at = ? RETURNING id",
        call,
    )
    return bool(found)


SETTLE_SCHEDULE_RUN: Op[Db, tuple[int, float], bool] = Op(
    "settle_schedule_run", one=_settle, lone=_settle
)
