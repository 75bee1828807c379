"""The SQL of SQLite migration `sqlite_migrations.m012_traces_search`, kept apart so
the migrations' module stays small: run traces, feedback reviews, the console's indexes, and
full-text search over messages (a contentless FTS5 index, messages are append-only: existing
ones indexed as the migration runs, later ones in batches by `sqlite_traces.CATCH_UP`).

Must not: be edited once released (it is part of a released migration); import anything.
"""

from __future__ import annotations

# The text of a user or assistant message's JSON body (a string, or its text parts joined):
# what full-text search indexes. `{body}` is the column, as `new.body` in a trigger.
_MESSAGE_TEXT = (
    "CASE json_type({body}, '$.content') WHEN 'text' THEN json_extract({body}, '$.content') "
    "ELSE (SELECT group_concat(json_extract(part.value, '$.text'), ' ') "
    "FROM json_each({body}, '$.content') AS part "
    "WHERE json_extract(part.value, '$.type') = 'text') END"
)

TRACES_SEARCH: tuple[str, ...] = (
    """
    CREATE TABLE run_trace (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        at REAL NOT NULL,
        duration_ms REAL,
        data TEXT NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX run_trace_run ON run_trace(run_id, seq)",
    "CREATE INDEX run_trace_timing ON run_trace(kind, at) WHERE kind = 'answer'",
    """
    CREATE TABLE feedback_reviews (
        run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        reviewed_by TEXT NOT NULL,
        note TEXT NOT NULL,
        at REAL NOT NULL
    )
    """,
    "CREATE INDEX conversations_updated ON conversations(updated_at, id)",
    "CREATE INDEX runs_user ON runs(user_id, started_at)",
    "CREATE VIRTUAL TABLE messages_fts USING fts5("
    "text, content='', tokenize='unicode61 remove_diacritics 2')",
    # Where indexing has reached: `sqlite_traces.CATCH_UP` indexes what was appended since,
    # in batches (one FTS5 transaction per message would cost every answer a segment write).
    "CREATE TABLE search_progress ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), last_id INTEGER NOT NULL)",
    f"""
    INSERT INTO messages_fts (rowid, text)
    SELECT id, COALESCE({_MESSAGE_TEXT.format(body="body")}, '') FROM messages
    WHERE role IN ('user', 'assistant')
    """,
    "INSERT INTO search_progress (id, last_id) SELECT 1, COALESCE(MAX(id), 0) FROM messages",
)
