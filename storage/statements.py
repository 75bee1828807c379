"""Statements both backends run alike, written once: a channel's memory and scheduled work.

Owns: each statement whose text is the same on SQLite and PostgreSQL but for its
placeholders, written in PostgreSQL's numbered form (`$1`, `$2`, ...) and rendered once, at
import, in SQLite's numbered form (`?1`, `?2`, ...: same numbers, so each backend binds the
same arguments in the same order). `Sql.postgres` and `Sql.sqlite` are the two texts.

Must not: run SQL or know a driver; hold a statement that differs beyond its placeholders
(casts, locks, a driver's own SQL): those stay in the backend's module.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from storage.rows import NOTE_COLUMNS, SCHEDULE_COLUMNS

_NUMBERED = re.compile(r"\$(\d+)")


class Sql(NamedTuple):
    postgres: str
    sqlite: str


def sql(text: str) -> Sql:
    """`text` (placeholders `$1`, `$2`, ...) for each backend."""
    return Sql(postgres=text, sqlite=_NUMBERED.sub(r"?\1", text))


# --- a channel's memory -------------------------------------------------------------------

NOTES = sql(f"SELECT {NOTE_COLUMNS} FROM channel_memory WHERE channel_key = $1 ORDER BY id")
# How many notes and characters the channel holds: $1 channel.
NOTES_HELD = sql(
    "SELECT count(*), COALESCE(SUM(length(text)), 0) FROM channel_memory WHERE channel_key = $1"
)
# $1 channel, $2 text, $3 by, $4 now.
ADD_NOTE = sql(
    "INSERT INTO channel_memory (channel_key, text, created_by, created_at) "
    f"VALUES ($1, $2, $3, $4) RETURNING {NOTE_COLUMNS}"
)
FORGET_NOTE = sql("DELETE FROM channel_memory WHERE channel_key = $1 AND id = $2 RETURNING id")
CLEAR_MEMORY = sql("DELETE FROM channel_memory WHERE channel_key = $1 RETURNING id")

# --- scheduled work -----------------------------------------------------------------------

ACTIVE_SCHEDULES_HELD = sql(
    "SELECT count(*) FROM schedules WHERE channel_key = $1 AND state = 'active'"
)
# $1 channel, $2 prompt, $3 cron, $4 timezone, $5 next_run_at, $6 by id, $7 by name, $8 now.
ADD_SCHEDULE = sql(
    "INSERT INTO schedules (channel_key, prompt, cron, timezone, next_run_at, created_by, "
    "created_by_name, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
    f"RETURNING {SCHEDULE_COLUMNS}"
)
SCHEDULES = sql(
    f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE channel_key = $1 AND state = 'active' "
    "ORDER BY id"
)
# $1 now, $2 limit.
DUE = sql(
    f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE state = 'active' "
    "AND next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2"
)
# $1 channel, $2 schedule.
CANCEL_SCHEDULE = sql(
    "UPDATE schedules SET state = 'cancelled', next_run_at = NULL, pending_due_at = NULL, "
    "pending_since = NULL WHERE channel_key = $1 AND id = $2 AND state = 'active' RETURNING id"
)
# $1 claimed before, $2 limit.
UNSETTLED = sql(
    f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE pending_due_at IS NOT NULL "
    "AND pending_since <= $1 AND state != 'cancelled' ORDER BY pending_since, id LIMIT $2"
)
# $1 schedule, $2 due at, $3 since, $4 now.
RECLAIM_SCHEDULE_RUN = sql(
    "UPDATE schedules SET pending_since = $4, pending_attempts = pending_attempts + 1 "
    "WHERE id = $1 AND pending_due_at = $2 AND pending_since = $3 AND state != 'cancelled' "
    f"RETURNING {SCHEDULE_COLUMNS}"
)
# $1 schedule, $2 due at.
SETTLE_SCHEDULE_RUN = sql(
    "UPDATE schedules SET pending_due_at = NULL, pending_since = NULL, pending_attempts = 0 "
    "WHERE id = $1 AND pending_due_at = $2 RETURNING id"
)
