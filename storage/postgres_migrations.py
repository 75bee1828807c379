"""The PostgreSQL schema, as named, ordered, append-only migrations.

Owns: every `CREATE`/`ALTER` the PostgreSQL store relies on, the `schema_migrations` table
that records which ran (version, name, when), and the decision whether a database may be used.

Rules (as for SQLite's `storage/sqlite_migrations.py`):
- A migration, once released, is never edited, renamed or reordered: append a new one. Names
  are `mNNN_what_it_does`, numbers strictly increasing from 1; version = how many ran.
- All pending migrations run in ONE transaction under a transaction-scoped advisory lock, so
  several instances starting at once migrate once, and an upgrade completes or leaves the
  schema exactly as it was (PostgreSQL DDL is transactional).
- Checks happen before anything is written: a schema holding tables but no
  `schema_migrations`, a history this build does not recognise, or a newer version raise
  `SchemaError` and nothing is touched.

The tables live in the connection's current schema (the first of its `search_path`), so
several Teammates (or test runs) can share one database in separate schemas.

Must not: know about messages or the store's queries; import anything but `core` and `storage`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from storage.base import SchemaError

_NAME = re.compile(r"^m(\d{3})_[a-z0-9_]+$")


@dataclass(frozen=True, slots=True)
class PgMigration:
    name: str
    sql: str


# Oldest first; append only. Mirrors SQLite's schema (same columns, same meanings) so the two
# backends answer the contract identically; small dicts are JSONB, message bodies are TEXT (the
# exact JSON `core.messages.dump_message` wrote, parsed only by us).
MIGRATIONS: list[PgMigration] = [
    PgMigration(
        "m001_initial_schema",
        """
        CREATE TABLE conversations (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            channel_key TEXT NOT NULL,
            title TEXT,
            settings JSONB NOT NULL DEFAULT '{}',
            last_seq BIGINT NOT NULL DEFAULT 0,  -- next append is last_seq + 1: no scans
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX conversations_channel ON conversations (channel_key);

        CREATE TABLE runs (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            outcome TEXT NOT NULL
                CHECK (outcome IN ('running', 'done', 'error', 'aborted', 'interrupted')),
            started_at DOUBLE PRECISION NOT NULL,
            finished_at DOUBLE PRECISION,
            user_id TEXT,
            channel_key TEXT,
            model TEXT,
            error TEXT,
            surface_ref JSONB NOT NULL DEFAULT '{}',
            owner JSONB NOT NULL DEFAULT '{}',
            input_tokens BIGINT NOT NULL DEFAULT 0,  -- totals, set when the run finishes
            output_tokens BIGINT NOT NULL DEFAULT 0,
            cache_read_tokens BIGINT NOT NULL DEFAULT 0,
            cache_write_tokens BIGINT NOT NULL DEFAULT 0,
            cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0
        );
        CREATE INDEX runs_conversation ON runs (conversation_id);
        CREATE INDEX runs_running ON runs (started_at, id) WHERE outcome = 'running';

        CREATE TABLE messages (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            seq BIGINT NOT NULL CHECK (seq > 0),
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool_result')),
            author_id TEXT,
            author_name TEXT,
            platform_message_id TEXT,
            run_id BIGINT REFERENCES runs (id) ON DELETE SET NULL,
            created_at DOUBLE PRECISION NOT NULL,
            body TEXT NOT NULL,  -- core.messages.dump_message JSON
            UNIQUE (conversation_id, seq)
        );
        CREATE INDEX messages_run ON messages (run_id) WHERE run_id IS NOT NULL;
        CREATE INDEX messages_platform_id ON messages (conversation_id, platform_message_id)
            WHERE platform_message_id IS NOT NULL;

        CREATE TABLE deliveries (
            id TEXT PRIMARY KEY,
            claimed_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX deliveries_claimed_at ON deliveries (claimed_at);

        CREATE TABLE compactions (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            summary TEXT NOT NULL,
            up_to_seq BIGINT NOT NULL CHECK (up_to_seq >= 0),
            details JSONB NOT NULL DEFAULT '{}',
            created_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX compactions_conversation ON compactions (conversation_id, id);

        CREATE TABLE usage_ledger (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            conversation_id BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            user_id TEXT,
            channel_key TEXT,
            model TEXT,
            at DOUBLE PRECISION NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            cache_read_tokens BIGINT NOT NULL,
            cache_write_tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX usage_ledger_at ON usage_ledger (at);
        CREATE INDEX usage_ledger_run ON usage_ledger (run_id);
        CREATE INDEX usage_ledger_conversation ON usage_ledger (conversation_id, at);
        CREATE INDEX usage_ledger_user ON usage_ledger (user_id, at);
        CREATE INDEX usage_ledger_channel ON usage_ledger (channel_key, at);

        CREATE TABLE inbox (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'delivered', 'dropped')),
            delivery_id TEXT,
            body TEXT,  -- dump_message JSON while pending or dropped; NULL once delivered
            surface_ref JSONB NOT NULL DEFAULT '{}',
            received_at DOUBLE PRECISION NOT NULL,
            settled_at DOUBLE PRECISION,
            seq BIGINT,  -- its position in history, once delivered
            run_id BIGINT REFERENCES runs (id) ON DELETE SET NULL,
            reason TEXT  -- why it was dropped
        );
        CREATE INDEX inbox_conversation ON inbox (conversation_id, id);
        CREATE INDEX inbox_pending ON inbox (conversation_id, id) WHERE state = 'pending';
        """,
    ),
    PgMigration(
        "m002_conversation_leases",
        # Which instance runs a conversation, until when (the database's clock decides):
        # see docs/architecture.md, "Several instances".
        """
        CREATE TABLE conversation_leases (
            conversation_id BIGINT PRIMARY KEY
                REFERENCES conversations (id) ON DELETE CASCADE,
            holder TEXT NOT NULL,
            acquired_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
            expires_at TIMESTAMPTZ NOT NULL
        );
        CREATE INDEX conversation_leases_holder ON conversation_leases (holder);
        """,
    ),
    PgMigration(
        "m003_single_statement_inbox",
        # Lets accepting and delivering be one statement each: `accepted` counts inbox items
        # ever accepted (a first message is the one that finds it 0 under the row lock), and
        # the inbox keeps the columns a delivered message gets in `messages`.
        """
        ALTER TABLE conversations ADD COLUMN accepted BIGINT NOT NULL DEFAULT 0;
        UPDATE conversations c
            SET accepted = (SELECT count(*) FROM inbox i WHERE i.conversation_id = c.id);
        ALTER TABLE inbox ADD COLUMN author_id TEXT, ADD COLUMN author_name TEXT,
            ADD COLUMN platform_message_id TEXT;
        """,
    ),
    PgMigration(
        "m004_feedback_channel_config",
        # Votes on a run's answer (one per person per run, the latest counting) and
        # per-channel configuration set at run time, as SQLite's m006.
        """
        CREATE TABLE run_feedback (
            run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            vote TEXT NOT NULL CHECK (vote IN ('up', 'down')),
            at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, user_id)
        );
        CREATE INDEX run_feedback_at ON run_feedback (at);
        CREATE INDEX runs_channel ON runs (channel_key, started_at);
        CREATE TABLE channel_config (
            channel_key TEXT PRIMARY KEY,
            config JSONB NOT NULL,
            updated_by TEXT,
            updated_at DOUBLE PRECISION NOT NULL
        );
        """,
    ),
    PgMigration(
        "m005_memory_schedules",
        # A channel's memory and scheduled work, as SQLite's m007.
        """
        CREATE TABLE channel_memory (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            channel_key TEXT NOT NULL,
            text TEXT NOT NULL,
            created_by TEXT,
            created_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX channel_memory_channel ON channel_memory (channel_key, id);
        CREATE TABLE schedules (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            channel_key TEXT NOT NULL,
            prompt TEXT NOT NULL,
            cron TEXT,
            timezone TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'active'
                CHECK (state IN ('active', 'done', 'cancelled')),
            next_run_at DOUBLE PRECISION,
            last_run_at DOUBLE PRECISION,
            created_by TEXT NOT NULL,
            created_by_name TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX schedules_channel ON schedules (channel_key, id) WHERE state = 'active';
        CREATE INDEX schedules_due ON schedules (next_run_at) WHERE state = 'active';
        """,
    ),
    PgMigration(
        # A claimed scheduled run stays pending until it is handed to the runner, so one whose
        # process died (or whose thread the platform refused) is tried again, not skipped.
        "m006_schedule_pending_runs",
        """
        ALTER TABLE schedules ADD COLUMN pending_due_at DOUBLE PRECISION;
        ALTER TABLE schedules ADD COLUMN pending_since DOUBLE PRECISION;
        ALTER TABLE schedules ADD COLUMN pending_attempts INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX schedules_pending ON schedules (pending_since)
            WHERE pending_due_at IS NOT NULL;
        """,
    ),
    PgMigration(
        # Fencing: a lease's epoch grows whenever it changes hands (from one sequence, so also
        # across a release and a new acquisition), and a run's writes carry the epoch they
        # were started under: docs/architecture.md, "Several instances".
        "m007_lease_epochs",
        """
        CREATE SEQUENCE lease_epochs;
        ALTER TABLE conversation_leases
            ADD COLUMN epoch BIGINT NOT NULL DEFAULT nextval('lease_epochs');
        """,
    ),
    PgMigration(
        # Every admin action from any surface, append-only, as SQLite's m009: the trigger
        # refuses to change or remove an entry once written.
        "m008_audit_log",
        """
        CREATE TABLE audit_log (
            id BIGSERIAL PRIMARY KEY,
            at DOUBLE PRECISION NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT NOT NULL,
            origin TEXT NOT NULL,
            detail JSONB NOT NULL DEFAULT '{}'
        );
        CREATE INDEX audit_log_actor ON audit_log (actor, id);
        CREATE INDEX audit_log_action ON audit_log (action, id);
        CREATE INDEX audit_log_target ON audit_log (target, id);
        CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'the audit log is append-only';
        END;
        $$;
        CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
            FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
        """,
    ),
    PgMigration(
        # The console, as SQLite's m010: its session secret (one for every instance), one-time
        # sign-in links, and the indexes its overview and health pages read by.
        "m009_console",
        """
        CREATE TABLE console_state (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE console_links (
            token_hash TEXT PRIMARY KEY,
            person TEXT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            used_at DOUBLE PRECISION
        );
        CREATE INDEX runs_started ON runs (started_at);
        CREATE INDEX runs_errors ON runs (finished_at) WHERE outcome = 'error';
        CREATE INDEX inbox_pending_all ON inbox (received_at) WHERE state = 'pending';
        """,
    ),
    PgMigration(
        # A tool call waiting for a person's yes, as SQLite's m011.
        "m010_approvals",
        """
        CREATE TABLE approvals (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id BIGINT NOT NULL,
            conversation_key TEXT NOT NULL,
            channel_key TEXT NOT NULL,
            run_id BIGINT NOT NULL,
            call_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            request TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN
                ('pending', 'approved', 'denied', 'timed_out', 'cancelled')),
            requested_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            decided_by TEXT,
            decided_by_name TEXT,
            decided_at DOUBLE PRECISION,
            UNIQUE (run_id, call_id)
        );
        CREATE INDEX approvals_pending ON approvals (id) WHERE state = 'pending';
        """,
    ),
    PgMigration(
        # Run traces (docs/architecture.md, "Run traces"): each step of a run, recorded as it
        # goes by the trace recorder, bounded per event. Feedback reviews: a 👎 looked at,
        # with a note. Full-text search over messages: a generated tsvector of a user or
        # assistant message's text (its string content, or its text parts) with a GIN index.
        # jsonb refuses the escape of NUL, which a text body may hold: it is read as a space
        # (the same six characters' shape, so the JSON stays valid whatever precedes it).
        "m011_traces_search",
        """
        CREATE TABLE run_trace (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            duration_ms DOUBLE PRECISION,
            data JSONB NOT NULL DEFAULT '{}'
        );
        CREATE INDEX run_trace_run ON run_trace (run_id, seq);
        CREATE INDEX run_trace_timing ON run_trace (kind, at)
            WHERE kind = 'answer';
        CREATE TABLE feedback_reviews (
            run_id BIGINT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
            reviewed_by TEXT NOT NULL,
            note TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL
        );
        CREATE INDEX conversations_updated ON conversations (updated_at, id);
        CREATE INDEX runs_user ON runs (user_id, started_at);
        ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
            CASE WHEN role IN ('user', 'assistant') THEN jsonb_to_tsvector(
                'simple'::regconfig,
                jsonb_path_query_array(
                    replace(body, '\\u0000', '\\u0020')::jsonb, '$.content ? (@.type() == "string")'
                )
                    || jsonb_path_query_array(
                        replace(body, '\\u0000', '\\u0020')::jsonb,
                        '$.content[*] ? (@.type == "text").text'
                    ),
                '["string"]'
            ) END
        ) STORED;
        CREATE INDEX messages_search ON messages USING GIN (search);
        """,
    ),
]


def _check_names(migrations: Sequence[PgMigration]) -> None:
    for number, step in enumerate(migrations, start=1):
        match = _NAME.match(step.name)
        if match is None or int(match.group(1)) != number:
            raise ValueError(f"migration {step.name!r} must be named m{number:03d}_what_it_does")


_check_names(MIGRATIONS)

MIGRATION_TIMEOUT_S = 3600.0
_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.teammate_migrations'))"


@dataclass(frozen=True, slots=True)
class PgSchemaState:
    schema: str
    version: int
    applied: tuple[str, ...]


async def inspect(
    connection: asyncpg.Connection, where: str, migrations: Sequence[PgMigration] = MIGRATIONS
) -> PgSchemaState:
    """Read (never write) what the current schema holds; `SchemaError` unless it is ours."""
    schema = await connection.fetchval("SELECT current_schema()")
    if schema is None:
        raise SchemaError(
            f"{where}: no schema to use (the search_path names none that exists); create it "
            "or fix the search_path"
        )
    tables = await connection.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 "
        "ORDER BY table_name",
        schema,
    )
    names = [str(row[0]) for row in tables]
    if not names:
        return PgSchemaState(schema=str(schema), version=0, applied=())
    if "schema_migrations" not in names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise SchemaError(
            f"{where}: schema {schema!r} holds tables that are not Teammate's ({shown}); "
            "Teammate refuses to use it and left it untouched. Use an empty schema or database."
        )
    rows = await connection.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
    applied = tuple(str(row[1]) for row in rows)
    known = [m.name for m in migrations]
    if len(applied) > len(known):
        raise SchemaError(
            f"{where} was written by a newer Teammate: schema version {len(applied)} "
            f"(last migration {applied[-1]!r}), but this build knows only {len(known)} "
            f"(up to {known[-1]!r}). Upgrade Teammate to use it; nothing was changed."
        )
    if list(applied) != known[: len(applied)] or [int(r[0]) for r in rows] != list(
        range(1, len(applied) + 1)
    ):
        raise SchemaError(
            f"{where} has a migration history this build does not recognise (applied: "
            f"{list(applied)}, expected: {known[: len(applied)]}); nothing was changed."
        )
    return PgSchemaState(schema=str(schema), version=len(applied), applied=applied)


async def migrate(
    connection: asyncpg.Connection, where: str, migrations: Sequence[PgMigration] = MIGRATIONS
) -> list[str]:
    """Bring the current schema up to date; return the names applied (none if it was)."""
    state = await inspect(connection, where, migrations)
    if state.version == len(migrations):
        return []
    async with connection.transaction():
        # Waiting for another instance's migration, or one rewriting a large table, may
        # take far longer than the pool's bound on a statement: an hour here.
        await connection.execute(_LOCK_SQL, timeout=MIGRATION_TIMEOUT_S)
        state = await inspect(connection, where, migrations)  # another instance may have won
        pending = list(enumerate(migrations, start=1))[state.version :]
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
            "applied_at DOUBLE PRECISION NOT NULL)"
        )
        for version, step in pending:
            try:
                await connection.execute(step.sql, timeout=MIGRATION_TIMEOUT_S)
            except asyncpg.PostgresError as exc:
                raise SchemaError(f"migration {step.name} failed on {where}: {exc}") from exc
            await connection.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                version,
                step.name,
                time.time(),
            )
    return [step.name for _, step in pending]
