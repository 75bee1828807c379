"""The SQLite schema, as named, ordered, append-only migrations.

Owns: every `CREATE`/`ALTER` the SQLite store relies on, the record of which migrations a
database has had, and the decision whether a file may be opened at all.

Rules (they keep every database that ever existed upgradable):
- A migration, once released, is never edited, renamed or reordered. Change the schema by
  appending a new one; names are `mNNN_what_it_does` with strictly increasing numbers.
- Migrations are synchronous functions over a `sqlite3.Connection` in autocommit mode
  (`isolation_level=None`); the store runs them on its writer connection's thread while opening.
- All pending migrations run in one `BEGIN IMMEDIATE` transaction, so an upgrade either
  completes or leaves the database exactly as the older Teammate expects it. (SQLite DDL,
  `PRAGMA user_version` and `PRAGMA application_id` are all transactional.)
- A database is recognised by `PRAGMA application_id`; `PRAGMA user_version` is the number of
  migrations applied and `_migrations` lists them by name with the time they ran.
- Checks happen before anything is written: a file that is not SQLite, a SQLite database that is
  not ours, or one written by a newer Teammate raises `SchemaError` and is left untouched; one
  with damaged pages (`PRAGMA quick_check`) raises `DatabaseDamaged`, a `SchemaError` too.

Must not: know about messages or the store's queries; import anything but `core` and `storage`.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from storage.approvals_sql import APPROVALS_SCHEMA
from storage.base import DatabaseDamaged, SchemaError
from storage.sqlite_schema_traces import TRACES_SEARCH

# "Tmat" in ASCII: marks a file as a Teammate database (bytes 68-71 of the SQLite header).
APPLICATION_ID = 0x546D6174

_NAME = re.compile(r"^m(\d{3})_[a-z0-9_]+$")


@dataclass(frozen=True, slots=True)
class Migration:
    name: str
    apply: Callable[[sqlite3.Connection], None]


MIGRATIONS: list[Migration] = []


def migration(
    fn: Callable[[sqlite3.Connection], None],
) -> Callable[[sqlite3.Connection], None]:
    """Append `fn` to `MIGRATIONS`; its name (`mNNN_...`) must follow the previous one's."""
    match = _NAME.match(fn.__name__)
    if match is None:
        raise ValueError(f"migration {fn.__name__!r} must be named mNNN_what_it_does")
    if int(match.group(1)) != len(MIGRATIONS) + 1:
        raise ValueError(
            f"migration {fn.__name__!r} is out of order: expected m{len(MIGRATIONS) + 1:03d}"
        )
    MIGRATIONS.append(Migration(fn.__name__, fn))
    return fn


def _run(db: sqlite3.Connection, *statements: str) -> None:
    # One statement per call: `executescript` would COMMIT the migration's transaction.
    for statement in statements:
        db.execute(statement)


# --- the migrations, oldest first: append only ---------------------------------------------


@migration
def m001_conversations_messages_runs(db: sqlite3.Connection) -> None:
    _run(
        db,
        """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            channel_key TEXT NOT NULL,
            title TEXT,
            settings TEXT NOT NULL DEFAULT '{}',
            last_seq INTEGER NOT NULL DEFAULT 0,  -- next append is last_seq + 1: no scans
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )
        """,
        "CREATE INDEX conversations_channel ON conversations(channel_key)",
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            outcome TEXT NOT NULL
                CHECK (outcome IN ('running', 'done', 'error', 'aborted', 'interrupted')),
            started_at REAL NOT NULL,
            finished_at REAL,
            user_id TEXT,
            channel_key TEXT,
            model TEXT,
            error TEXT,
            surface_ref TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX runs_conversation ON runs(conversation_id)",
        "CREATE INDEX runs_running ON runs(started_at) WHERE outcome = 'running'",
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL CHECK (seq > 0),
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool_result')),
            author_id TEXT,
            author_name TEXT,
            platform_message_id TEXT,
            run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            created_at REAL NOT NULL,
            body TEXT NOT NULL,  -- the message as core.messages.dump_message JSON
            UNIQUE (conversation_id, seq)
        )
        """,
        "CREATE INDEX messages_run ON messages(run_id) WHERE run_id IS NOT NULL",
        """
        CREATE INDEX messages_platform_id ON messages(conversation_id, platform_message_id)
            WHERE platform_message_id IS NOT NULL
        """,
        """
        CREATE TABLE deliveries (
            id TEXT PRIMARY KEY,
            claimed_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX deliveries_claimed_at ON deliveries(claimed_at)",
    )


@migration
def m002_compactions(db: sqlite3.Connection) -> None:
    _run(
        db,
        """
        CREATE TABLE compactions (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            summary TEXT NOT NULL,
            up_to_seq INTEGER NOT NULL CHECK (up_to_seq >= 0),
            details TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX compactions_conversation ON compactions(conversation_id, id)",
    )


@migration
def m003_usage_ledger(db: sqlite3.Connection) -> None:
    _run(
        db,
        """
        CREATE TABLE usage_ledger (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            user_id TEXT,
            channel_key TEXT,
            model TEXT,
            at REAL NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            cost_usd REAL NOT NULL
        )
        """,
        "CREATE INDEX usage_ledger_at ON usage_ledger(at)",
        "CREATE INDEX usage_ledger_run ON usage_ledger(run_id)",
        "CREATE INDEX usage_ledger_conversation ON usage_ledger(conversation_id, at)",
        "CREATE INDEX usage_ledger_user ON usage_ledger(user_id, at)",
        "CREATE INDEX usage_ledger_channel ON usage_ledger(channel_key, at)",
        # A finished run keeps its totals, so run history never re-sums the ledger.
        "ALTER TABLE runs ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0",
    )


# --- checking and applying -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchemaState:
    """What a database says about itself. `version` is how many migrations it has had."""

    version: int
    applied: tuple[str, ...]
    blank: bool


def inspect(
    db: sqlite3.Connection, path: str, migrations: Sequence[Migration] = MIGRATIONS
) -> SchemaState:
    """Read (never write) what `db` is; raise `SchemaError` unless it is ours to open."""
    try:
        app_id = _pragma_int(db, "application_id")
        version = _pragma_int(db, "user_version")
        rows = db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        raise SchemaError(
            f"{path} is not a SQLite database ({exc}); Teammate refuses to open it and left it "
            "untouched. Point Teammate at a new file or at its own database."
        ) from exc
    tables = sorted(str(row[0]) for row in rows)

    if app_id == 0 and version == 0 and not tables:
        return SchemaState(version=0, applied=(), blank=True)
    if app_id != APPLICATION_ID:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise SchemaError(
            f"{path} is a SQLite database but not a Teammate one (application_id={app_id:#x}, "
            f"tables: {shown or 'none'}); Teammate refuses to open it and left it untouched."
        )

    applied: tuple[str, ...] = ()
    if "_migrations" in tables:
        names = db.execute("SELECT name FROM _migrations ORDER BY rowid").fetchall()
        applied = tuple(str(row[0]) for row in names)
    known = [m.name for m in migrations]
    if version > len(known):
        raise SchemaError(
            f"{path} was written by a newer Teammate: schema version {version} "
            f"(last migration {applied[-1] if applied else '?'!r}), but this build knows only "
            f"{len(known)} (up to {known[-1]!r}). Upgrade Teammate to open it; the file was "
            "left untouched."
        )
    if list(applied) != known[:version]:
        raise SchemaError(
            f"{path} has a migration history this build does not recognise "
            f"(applied: {list(applied)}, expected: {known[:version]}); the file was left "
            "untouched."
        )
    return SchemaState(version=version, applied=applied, blank=False)


def migrate(
    db: sqlite3.Connection, path: str, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """Bring `db` up to date; return the names applied (none when it already was).

    `db` must be in autocommit mode (`isolation_level=None`). Safe against another process
    migrating the same file at once: the version is re-read under the write lock.
    """
    state = inspect(db, path, migrations)
    if state.version == len(migrations):
        return []
    db.execute("BEGIN IMMEDIATE")
    try:
        state = inspect(db, path, migrations)
        pending = list(migrations[state.version :])
        db.execute(
            "CREATE TABLE IF NOT EXISTS _migrations ("
            "name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        for step in pending:
            try:
                step.apply(db)
            except sqlite3.Error as exc:
                raise SchemaError(f"migration {step.name} failed on {path}: {exc}") from exc
            db.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (step.name, time.time())
            )
        # PRAGMA takes no parameters; both values are integers we computed.
        db.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        db.execute(f"PRAGMA user_version = {len(migrations):d}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return [step.name for step in pending]


def integrity_problems(db: sqlite3.Connection, *, full: bool, limit: int = 100) -> list[str]:
    """What SQLite finds wrong with the file (none: `[]`); reads only.

    `full=False` is `PRAGMA quick_check`: every page and record is read, but indexes are not
    matched against their tables (linear in the file's size, fine at start-up). `full=True`
    adds that, and foreign keys (`PRAGMA integrity_check`, `foreign_key_check`).
    """
    try:
        pragma = "integrity_check" if full else "quick_check"
        rows = db.execute(f"PRAGMA {pragma}({limit:d})").fetchall()
        problems = [str(row[0]) for row in rows if str(row[0]) != "ok"]
        if full:
            orphans = db.execute("PRAGMA foreign_key_check").fetchmany(limit)
            problems += [f"{row[0]} row {row[1]} refers to a missing {row[2]}" for row in orphans]
    except sqlite3.DatabaseError as exc:  # e.g. "database disk image is malformed"
        return [str(exc)]
    return problems[:limit]


def refuse_damaged(db: sqlite3.Connection, path: str) -> None:
    """Raise `DatabaseDamaged` if the quick check finds anything wrong; writes nothing."""
    problems = integrity_problems(db, full=False)
    if problems:
        raise DatabaseDamaged(path, problems)


def _pragma_int(db: sqlite3.Connection, name: str) -> int:
    row = db.execute(f"PRAGMA {name}").fetchone()
    return int(row[0])


@migration
def m004_run_owner(db: sqlite3.Connection) -> None:
    # Which process runs a run (host, pid, process start), so that recovery at start-up can
    # tell a crashed process's runs from those of another live process on the same database.
    _run(db, "ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '{}'")


@migration
def m005_inbox(db: sqlite3.Connection) -> None:
    # Accepted user messages wait here until the loop delivers them; only then do they enter
    # `messages`, at the position the model saw them. `body` is cleared on delivery (the
    # message then lives in `messages` at `seq`), so nothing is stored twice.
    _run(
        db,
        """
        CREATE TABLE inbox (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'delivered', 'dropped')),
            delivery_id TEXT,
            body TEXT,  -- core.messages.dump_message JSON while pending or dropped
            surface_ref TEXT NOT NULL DEFAULT '{}',
            received_at REAL NOT NULL,
            settled_at REAL,
            seq INTEGER,  -- its position in history, once delivered
            run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            reason TEXT  -- why it was dropped
        )
        """,
        "CREATE INDEX inbox_conversation ON inbox(conversation_id, id)",
        "CREATE INDEX inbox_pending ON inbox(conversation_id, id) WHERE state = 'pending'",
    )


@migration
def m006_feedback_channel_config(db: sqlite3.Connection) -> None:
    # 👍/👎 on a run's answer: one vote per person per run, the latest replacing the earlier.
    # Per-channel configuration set at run time (a channel admin's slash command), one JSON
    # object per channel, layered over the configuration file by the bot.
    _run(
        db,
        """
        CREATE TABLE run_feedback (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            user_id TEXT NOT NULL,
            vote TEXT NOT NULL CHECK (vote IN ('up', 'down')),
            at REAL NOT NULL,
            PRIMARY KEY (run_id, user_id)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX run_feedback_at ON run_feedback(at)",
        # A channel's day (`/teammate usage`) counts its runs without scanning them all.
        "CREATE INDEX runs_channel ON runs(channel_key, started_at)",
        """
        CREATE TABLE channel_config (
            channel_key TEXT PRIMARY KEY,
            config TEXT NOT NULL,
            updated_by TEXT,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
    )


@migration
def m007_memory_schedules(db: sqlite3.Connection) -> None:
    # A channel's memory: short notes shown to the model with every run in the channel.
    # Scheduled work: a prompt run in a channel when its cron expression matches (in its time
    # zone) or once; `next_run_at` is compared and moved in one statement to claim a run.
    _run(
        db,
        """
        CREATE TABLE channel_memory (
            id INTEGER PRIMARY KEY,
            channel_key TEXT NOT NULL,
            text TEXT NOT NULL,
            created_by TEXT,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX channel_memory_channel ON channel_memory(channel_key, id)",
        """
        CREATE TABLE schedules (
            id INTEGER PRIMARY KEY,
            channel_key TEXT NOT NULL,
            prompt TEXT NOT NULL,
            cron TEXT,  -- NULL: a one-off at next_run_at
            timezone TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'active'
                CHECK (state IN ('active', 'done', 'cancelled')),
            next_run_at REAL,
            last_run_at REAL,
            created_by TEXT NOT NULL,
            created_by_name TEXT NOT NULL,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX schedules_channel ON schedules(channel_key, id) WHERE state = 'active'",
        "CREATE INDEX schedules_due ON schedules(next_run_at) WHERE state = 'active'",
    )


@migration
def m008_schedule_pending_runs(db: sqlite3.Connection) -> None:
    # A claimed scheduled run stays pending until it is handed to the runner, so one whose
    # process died (or whose thread the platform refused) is tried again, not skipped.
    _run(
        db,
        "ALTER TABLE schedules ADD COLUMN pending_due_at REAL",
        "ALTER TABLE schedules ADD COLUMN pending_since REAL",
        "ALTER TABLE schedules ADD COLUMN pending_attempts INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX schedules_pending ON schedules(pending_since) "
        "WHERE pending_due_at IS NOT NULL",
    )


@migration
def m009_audit_log(db: sqlite3.Connection) -> None:
    # Every admin action from any surface, append-only: the triggers refuse to change or
    # remove an entry once written (docs/architecture.md, "The audit log").
    _run(
        db,
        """
        CREATE TABLE audit_log (
            id INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT NOT NULL,
            origin TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX audit_log_actor ON audit_log(actor, id)",
        "CREATE INDEX audit_log_action ON audit_log(action, id)",
        "CREATE INDEX audit_log_target ON audit_log(target, id)",
        "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
        "CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    )


@migration
def m010_console(db: sqlite3.Connection) -> None:
    # The console (bots.console): its session secret, generated once and shared by whoever
    # opens the database; one-time sign-in links (the token's hash, good once until
    # `expires_at`); and the indexes its overview and health pages read by.
    _run(
        db,
        """
        CREATE TABLE console_state (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE console_links (
            token_hash TEXT PRIMARY KEY,
            person TEXT NOT NULL,
            expires_at REAL NOT NULL,
            used_at REAL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX runs_started ON runs(started_at)",
        "CREATE INDEX runs_errors ON runs(finished_at) WHERE outcome = 'error'",
    )


@migration
def m011_approvals(db: sqlite3.Connection) -> None:
    # A tool call waiting for a person's yes: one row per call, decided once (its module).
    _run(db, *APPROVALS_SCHEMA)


@migration
def m012_traces_search(db: sqlite3.Connection) -> None:
    # Run traces, feedback reviews, the console's indexes and full-text search over messages
    # (docs/architecture.md, "Run traces" and "Search"): the statements are in their module.
    _run(db, *TRACES_SEARCH)
