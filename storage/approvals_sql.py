"""The statements of the `approvals` table, written once for both backends.

Owns: each statement in `storage.statements`' numbered form (`Sql.postgres`, `Sql.sqlite`).
A decision is one conditional `UPDATE … WHERE state = 'pending' RETURNING`: of two clicks on
two instances, exactly one decision counts.

Must not: run SQL or know a driver; import `tools` or `bots`.
"""

from __future__ import annotations

from storage.approvals import APPROVAL_COLUMNS
from storage.statements import sql

# $1 conversation id, $2 conversation key, $3 channel, $4 run, $5 call, $6 tool, $7 request,
# $8 now, $9 expires. The same call asked again (a resumed run) keeps its first request.
ADD = sql(
    "INSERT INTO approvals (conversation_id, conversation_key, channel_key, run_id, call_id, "
    "tool_name, request, state, requested_at, expires_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9) "
    "ON CONFLICT (run_id, call_id) DO NOTHING"
)
BY_CALL = sql(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = $1 AND call_id = $2")
BY_ID = sql(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1")
OF_RUN = sql(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = $1 ORDER BY id")
PENDING = sql(
    f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE state = 'pending' ORDER BY id LIMIT $1"
)
# $1 id, $2 state, $3 by, $4 by name, $5 now. Only a pending request is decided: one wins.
DECIDE = sql(
    "UPDATE approvals SET state = $2, decided_by = $3, decided_by_name = $4, decided_at = $5 "
    f"WHERE id = $1 AND state = 'pending' RETURNING {APPROVAL_COLUMNS}"
)

# The table (SQLite's m011_approvals): here, beside the statements that read and write it.
APPROVALS_TABLE = """
        CREATE TABLE approvals (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            conversation_key TEXT NOT NULL,
            channel_key TEXT NOT NULL,
            run_id INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            request TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN
                ('pending', 'approved', 'denied', 'timed_out', 'cancelled')),
            requested_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            decided_by TEXT,
            decided_by_name TEXT,
            decided_at REAL,
            UNIQUE (run_id, call_id)
        )
        """
APPROVALS_SCHEMA = (
    APPROVALS_TABLE,
    "CREATE INDEX approvals_pending ON approvals(id) WHERE state = 'pending'",
)
