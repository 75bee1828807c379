"""Rows of a channel's memory and of scheduled work, read back the same on every backend.

Owns: the column lists both backends select, and turning such a row into `MemoryNote` or
`Schedule` (both drivers hand back rows indexable by position).

Must not: know a driver or write SQL beyond the column lists.
"""

from __future__ import annotations

from typing import Any

from storage.base import MemoryNote, Schedule

NOTE_COLUMNS = "id, channel_key, text, created_by, created_at"
SCHEDULE_COLUMNS = (
    "id, channel_key, prompt, cron, timezone, state, next_run_at, last_run_at, "
    "created_by, created_by_name, created_at, pending_due_at, pending_since, pending_attempts"
)


def note_from(row: Any) -> MemoryNote:
    return MemoryNote(
        id=int(row[0]),
        channel_key=str(row[1]),
        text=str(row[2]),
        created_by=None if row[3] is None else str(row[3]),
        created_at=float(row[4]),
    )


def schedule_from(row: Any) -> Schedule:
    return Schedule(
        id=int(row[0]),
        channel_key=str(row[1]),
        prompt=str(row[2]),
        cron=None if row[3] is None else str(row[3]),
        timezone=str(row[4]),
        state=row[5],
        next_run_at=None if row[6] is None else float(row[6]),
        last_run_at=None if row[7] is None else float(row[7]),
        created_by=str(row[8]),
        created_by_name=str(row[9]),
        created_at=float(row[10]),
        pending_due_at=None if row[11] is None else float(row[11]),
        pending_since=None if row[12] is None else float(row[12]),
        pending_attempts=int(row[13]),
    )
