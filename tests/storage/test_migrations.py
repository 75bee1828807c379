"""Any database Teammate ever wrote opens and upgrades; anything else is refused untouched."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from core.messages import AssistantMessage, Author, Text, Usage, UserMessage, dump_message
from storage.base import SchemaError
from storage.sqlite import SqliteStore
from storage.sqlite_migrations import APPLICATION_ID, MIGRATIONS, Migration, migrate


def bytes_of(path: Path) -> bytes:
    return path.read_bytes()


def write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def schema_of(path: Path) -> tuple[int, int, list[str], str]:
    with sqlite3.connect(path) as raw:
        app_id = raw.execute("PRAGMA application_id").fetchone()[0]
        version = raw.execute("PRAGMA user_version").fetchone()[0]
        applied = [row[0] for row in raw.execute("SELECT name FROM _migrations ORDER BY rowid")]
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
    return app_id, version, applied, mode


def test_migrations_are_named_uniquely_in_increasing_order() -> None:
    names = [m.name for m in MIGRATIONS]
    assert len(names) == len(set(names)) >= 2
    assert names == sorted(names)
    assert [int(name[1:4]) for name in names] == list(range(1, len(names) + 1))


async def test_a_blank_database_gets_every_migration(db_path: Path) -> None:
    async with SqliteStore.open(db_path) as store:
        conversation = await store.get_or_create_conversation("terminal:x", channel_key="t")
        await store.append_message(conversation.id, UserMessage(content="hello"))

    assert schema_of(db_path) == (
        APPLICATION_ID,
        len(MIGRATIONS),
        [m.name for m in MIGRATIONS],
        "wal",
    )
    # Opening an up-to-date database again applies nothing and keeps the data.
    async with SqliteStore.open(db_path) as store:
        assert await store.message_count(conversation.id) == 1
    assert schema_of(db_path)[1:3] == (len(MIGRATIONS), [m.name for m in MIGRATIONS])


async def test_an_empty_file_is_treated_as_a_blank_database(db_path: Path) -> None:
    write(db_path, b"")
    async with SqliteStore.open(db_path) as store:
        assert await store.claim_delivery("e1") is True
    assert schema_of(db_path)[0] == APPLICATION_ID


async def test_an_older_database_is_upgraded_in_place_and_keeps_its_data(db_path: Path) -> None:
    # A database as the first release left it: only m001, with a conversation, its messages
    # and a run that was still going when that release stopped.
    user = UserMessage(content="hi", author=Author(id="U1", name="Ada"), timestamp=1.0)
    reply = AssistantMessage(content=[Text(text="hello Ada")], timestamp=2.0)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        assert migrate(db, str(db_path), MIGRATIONS[:1]) == [MIGRATIONS[0].name]
        db.execute(
            "INSERT INTO conversations (id, key, channel_key, title, settings, last_seq, "
            "created_at, updated_at) VALUES (1, 'slack:T:C:1.0', 'slack:T:C', 'Old', "
            '\'{"model": "m"}\', 2, 10.0, 20.0)'
        )
        db.execute(
            "INSERT INTO runs (id, conversation_id, outcome, started_at, user_id, channel_key) "
            "VALUES (1, 1, 'running', 15.0, 'U1', 'slack:T:C')"
        )
        for seq, message in ((1, user), (2, reply)):
            db.execute(
                "INSERT INTO messages (conversation_id, seq, role, created_at, body) "
                "VALUES (1, ?, ?, 0, ?)",
                (seq, message.role, dump_message(message).decode()),
            )
        db.execute("INSERT INTO deliveries (id, claimed_at) VALUES ('Ev1', 0)")
    assert schema_of(db_path)[1:3] == (1, [MIGRATIONS[0].name])

    async with SqliteStore.open(db_path) as store:
        loaded = await store.load(1)
        assert loaded.conversation.title == "Old"
        assert loaded.conversation.settings == {"model": "m"}
        assert [s.message for s in loaded.messages] == [user, reply]
        assert await store.claim_delivery("Ev1") is False
        [run] = await store.running_runs()
        assert run.id == 1
        assert run.usage == Usage()
        # What the later migrations added works on the old data.
        await store.record_usage(1, Usage(input=3, cost=0.25))
        assert (await store.finish_run(1, "interrupted")).usage == Usage(input=3, cost=0.25)
        await store.add_compaction(1, "summary", up_to_seq=1)
        assert (await store.append_message(1, UserMessage(content="later"))).seq == 3
        assert [s.seq for s in (await store.load(1)).messages] == [2, 3]
        # The inbox works on an old conversation: it has history, so no backfill is stored.
        accepted = await store.accept_delivery(
            "slack:T:C:1.0",
            UserMessage(content="new"),
            channel_key="slack:T:C",
            delivery_id="Ev2",
            backfill=[UserMessage(content="backfill")],
        )
        assert accepted is not None and not accepted.created
        assert [s.seq for s in await store.deliver(1, [accepted.item.id])] == [4]

    assert schema_of(db_path)[1:3] == (len(MIGRATIONS), [m.name for m in MIGRATIONS])


async def test_a_failed_migration_leaves_the_database_as_it_was(db_path: Path) -> None:
    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        migrate(db, str(db_path), MIGRATIONS[:1])

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x INTEGER)")
        db.execute("THIS IS NOT SQL")

    migrations = [*MIGRATIONS[:2], Migration("m003_broken", broken)]
    with pytest.raises(SchemaError, match="m003_broken"):
        await SqliteStore.open(db_path, migrations=migrations)

    assert schema_of(db_path)[1:3] == (1, [MIGRATIONS[0].name])
    with sqlite3.connect(db_path) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables
    assert "compactions" not in tables  # m002 ran in the same, rolled-back transaction


async def test_a_database_from_a_newer_teammate_is_refused_and_left_untouched(
    db_path: Path,
) -> None:
    async with SqliteStore.open(db_path) as store:
        conversation = await store.get_or_create_conversation("terminal:x", channel_key="t")
        await store.append_message(conversation.id, UserMessage(content="from the future"))
    future = len(MIGRATIONS) + 1
    with sqlite3.connect(db_path) as raw:
        raw.execute(f"PRAGMA user_version = {future}")
        raw.execute(
            "INSERT INTO _migrations (name, applied_at) VALUES (?, 0)",
            (f"m{future:03d}_something_new",),
        )
    before = bytes_of(db_path)

    with pytest.raises(SchemaError, match="newer Teammate") as refused:
        await SqliteStore.open(db_path)
    message = str(refused.value)
    assert f"schema version {future}" in message
    assert f"m{future:03d}_something_new" in message
    assert "Upgrade Teammate" in message

    assert bytes_of(db_path) == before


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(os.urandom(8192), id="random-bytes"),
        pytest.param(b"# notes\nthis is a text file, not a database\n" * 50, id="text-file"),
        pytest.param(b"SQLite format 3\x00" + b"\xff" * 84, id="truncated-header"),
    ],
)
async def test_a_file_that_is_not_a_database_is_refused_and_left_untouched(
    db_path: Path, content: bytes
) -> None:
    write(db_path, content)
    with pytest.raises(SchemaError, match="not a SQLite database"):
        await SqliteStore.open(db_path)
    assert bytes_of(db_path) == content
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


async def test_someone_elses_sqlite_database_is_refused_and_left_untouched(
    db_path: Path,
) -> None:
    with sqlite3.connect(db_path) as raw:
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        raw.execute("INSERT INTO invoices (total) VALUES (9.5)")
    before = bytes_of(db_path)

    with pytest.raises(SchemaError, match="not a Teammate one") as refused:
        await SqliteStore.open(db_path)
    assert "invoices" in str(refused.value)
    assert bytes_of(db_path) == before
