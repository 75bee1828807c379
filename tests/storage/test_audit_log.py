"""The audit log: entries kept as written, newest first, filtered and paged, never changed."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import asyncpg
import pytest

from storage.base import ConversationStore
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests.storage.conftest import FakeClock


async def _write_three(store: ConversationStore) -> list[int]:
    return [
        await store.append_audit(
            actor="slack:U1",
            action="config.set",
            target="slack:T:C1",
            origin="slack",
            detail={"change": {"model": "claude-x"}, "note": "✓ ünïcode"},
        ),
        await store.append_audit(
            actor="discord:42",
            action="run.stop",
            target="discord:G:C9",
            origin="discord",
            detail={},
        ),
        await store.append_audit(
            actor="slack:U1",
            action="memory.clear",
            target="slack:T:C1",
            origin="console 10.0.0.7",
            detail={"notes": 3},
        ),
    ]


async def test_entries_come_back_newest_first_as_written(store: ConversationStore) -> None:
    ids = await _write_three(store)
    assert ids == sorted(ids) and len(set(ids)) == 3
    entries = await store.audit_entries(limit=10)
    assert [entry.id for entry in entries] == ids[::-1]
    first = entries[-1]
    assert (first.actor, first.action, first.target, first.origin) == (
        "slack:U1",
        "config.set",
        "slack:T:C1",
        "slack",
    )
    assert first.detail == {"change": {"model": "claude-x"}, "note": "✓ ünïcode"}
    assert entries[0].origin == "console 10.0.0.7"


async def test_entries_are_filtered_by_actor_action_and_target_and_paged(
    store: ConversationStore,
) -> None:
    ids = await _write_three(store)
    by_u1 = await store.audit_entries(limit=10, actor="slack:U1")
    assert [entry.id for entry in by_u1] == [ids[2], ids[0]]
    assert [e.id for e in await store.audit_entries(limit=10, action="run.stop")] == [ids[1]]
    in_c1 = await store.audit_entries(limit=10, target="slack:T:C1", action="memory.clear")
    assert [entry.id for entry in in_c1] == [ids[2]]
    assert await store.audit_entries(limit=10, actor="slack:U2") == []
    page_one = await store.audit_entries(limit=2)
    page_two = await store.audit_entries(limit=2, before_id=page_one[-1].id)
    assert [e.id for e in page_one + page_two] == ids[::-1]


async def test_a_page_must_hold_an_entry(store: ConversationStore) -> None:
    with pytest.raises(ValueError):
        await store.audit_entries(limit=0)


async def test_sqlite_refuses_to_change_or_remove_an_entry(db_path: Path, clock: FakeClock) -> None:
    async with SqliteStore.open(db_path, clock=clock) as store:
        await _write_three(store)
    with sqlite3.connect(db_path) as db:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("UPDATE audit_log SET actor = 'slack:U666'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("DELETE FROM audit_log")
    async with SqliteStore.open(db_path, clock=clock) as reopened:
        entries = await reopened.audit_entries(limit=10)
    assert [entry.actor for entry in entries] == ["slack:U1", "discord:42", "slack:U1"]
    assert {entry.at for entry in entries} == {clock.now}


async def test_postgres_refuses_to_change_remove_or_truncate_an_entry(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as store:
        await _write_three(store)
        connection = await asyncpg.connect(pg_url)
        try:
            for statement in (
                "UPDATE audit_log SET actor = 'slack:U666'",
                "DELETE FROM audit_log",
                "TRUNCATE audit_log",
            ):
                with pytest.raises(asyncpg.RaiseError, match="append-only"):
                    await connection.execute(statement)
        finally:
            await connection.close()
        entries = await store.audit_entries(limit=10)
        assert len(entries) == 3
        # Stamped by the database's clock, not the instance's.
        assert all(abs(entry.at - time.time()) < 600 for entry in entries)
