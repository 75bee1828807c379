"""A database with damaged pages is refused at open, before anything is written to it."""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from core.messages import UserMessage
from storage.base import DatabaseDamaged, SchemaError
from storage.sqlite import SqliteStore
from tests.storage.conftest import FakeClock

PAGE = 4096  # SQLite's default page size, which the store keeps


async def write_a_conversation(db_path: Path, clock: FakeClock, messages: int = 300) -> None:
    async with SqliteStore.open(db_path, clock=clock) as store:
        conversation = await store.get_or_create_conversation("terminal:x", channel_key="t")
        for n in range(messages):
            await store.append_message(conversation.id, UserMessage(content=f"message {n} " * 40))


def damage_middle_pages(db_path: Path) -> None:
    """Overwrite whole pages in the middle of the file with noise, as a bad disk would."""
    pages = db_path.stat().st_size // PAGE
    assert pages > 10, "the file is too small to damage its middle"
    noise = random.Random(8).randbytes(3 * PAGE)
    with db_path.open("r+b") as file:
        file.seek((pages // 2) * PAGE)
        file.write(noise)


def damage_a_page_header(db_path: Path) -> None:
    """A few wrong bytes in one page's cell pointers (the messages table's root page: a page
    found by position may be a free one, whose damage no check can see): SQLite reports rows
    out of order."""
    with closing(sqlite3.connect(db_path)) as db:
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'messages'"
        ).fetchone()
    with db_path.open("r+b") as file:
        file.seek((int(root) - 1) * PAGE + 8)
        file.write(b"\x07" * 24)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_healthy_database_passes_the_full_check(db_path: Path, clock: FakeClock) -> None:
    await write_a_conversation(db_path, clock, messages=50)

    async with SqliteStore.open(db_path, clock=clock) as store:
        assert await store.integrity_check() == []
    assert await SqliteStore.check_file(db_path) == []


@pytest.mark.parametrize("damage", [damage_middle_pages, damage_a_page_header])
async def test_a_database_with_damaged_pages_is_refused_and_left_untouched(
    db_path: Path, clock: FakeClock, damage: Callable[[Path], None]
) -> None:
    await write_a_conversation(db_path, clock)
    damage(db_path)
    before = digest(db_path)

    with pytest.raises(DatabaseDamaged) as refused:
        await SqliteStore.open(db_path, clock=clock)

    message = str(refused.value)
    assert str(db_path) in message
    assert "\n" not in message and len(message) < 1_000
    assert "teammate doctor" in message  # says what to do next
    assert refused.value.problems  # what the quick check found
    assert isinstance(refused.value, SchemaError)  # callers that refuse foreign files refuse it
    assert digest(db_path) == before  # nothing was written

    # The full check still reports what is wrong, without writing either.
    problems = await SqliteStore.check_file(db_path)
    assert problems
    assert digest(db_path) == before


async def test_checking_a_missing_file_does_not_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"

    problems = await SqliteStore.check_file(missing)

    assert problems and "unable to open" in problems[0]
    assert not missing.exists()
