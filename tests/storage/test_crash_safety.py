"""SIGKILL a writer mid-stream, many times: every committed message survives, nothing torn."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
from pathlib import Path

from core.messages import UserMessage
from storage.sqlite import SqliteStore
from tests.storage.crash_writer import (
    BACKFILL_TEXT,
    CONVERSATION_KEY,
    INBOX_KEY,
    expected_message,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
KILLS = 20
INBOX_KILLS = 8


async def kill_at_a_random_moment(
    db_path: Path, rng: random.Random, log: Path, *mode: str
) -> list[bytes]:
    """Start the writer, SIGKILL it, and return the lines it reported as committed."""
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.storage.crash_writer",
            str(db_path),
            *mode,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        assert proc.stdout is not None
        if rng.random() < 0.2:
            # Sometimes while it is still opening (and perhaps migrating) the database.
            await asyncio.sleep(rng.uniform(0.0, 0.3))
        else:
            ready = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
            assert ready == b"ready\n", ready
            await asyncio.sleep(rng.uniform(0.005, 0.15))
        proc.send_signal(signal.SIGKILL)
        output = await proc.stdout.read()
        assert await proc.wait() == -signal.SIGKILL
    # Only whole lines count: the kill may have cut the last one short.
    lines = output.split(b"\n")[:-1]
    return [line for line in lines if line != b"ready"]


async def kill_writer_at_a_random_moment(db_path: Path, rng: random.Random, log: Path) -> list[int]:
    """Start the writer, SIGKILL it, and return the seqs it reported as committed."""
    return [int(line) for line in await kill_at_a_random_moment(db_path, rng, log)]


async def test_killed_writers_never_lose_a_committed_message_or_tear_one(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "crash.db"
    rng = random.Random(20240607)
    total_reported = 0
    for kill in range(KILLS):
        reported = await kill_writer_at_a_random_moment(db_path, rng, tmp_path / "writer.log")
        total_reported += len(reported)
        if not db_path.exists():
            assert reported == []
            continue

        with sqlite3.connect(db_path) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

        async with SqliteStore.open(db_path) as store:
            conversation = await store.get_conversation(CONVERSATION_KEY)
            if conversation is None:
                assert reported == [], (
                    f"kill {kill}: reported {reported[:3]}... but no conversation"
                )
                continue
            loaded = await store.load(conversation.id)
            assert await store.message_count(conversation.id) == len(loaded.messages)

        stored = [s.message for s in loaded.messages]
        assert [s.seq for s in loaded.messages] == list(range(1, len(stored) + 1))
        # An exact prefix of the writer's sequence: nothing torn, nothing out of place...
        assert stored == [expected_message(seq) for seq in range(1, len(stored) + 1)], kill
        # ...and nothing the writer saw committed is missing.
        if reported:
            assert reported[-1] <= len(stored), (kill, reported[-1], len(stored))

    # The kills landed mid-stream, not only before the first append.
    assert total_reported > KILLS * 5
    print(f"{KILLS} kills, {total_reported} committed appends reported")


async def test_killed_bots_never_claim_a_delivery_without_its_message(tmp_path: Path) -> None:
    # Issue 8, defect E, across process death: claiming a delivery and storing its message are
    # one transaction, so a claimed delivery always has its message, and the backfill of a new
    # conversation is stored once, whoever stored it.
    db_path = tmp_path / "inbox.db"
    rng = random.Random(20261201)
    reported: list[str] = []
    for _ in range(INBOX_KILLS):
        lines = await kill_at_a_random_moment(db_path, rng, tmp_path / "bot.log", "inbox")
        reported += [line.decode() for line in lines]

    assert db_path.exists() and reported, "no kill landed after the first acceptance"
    with sqlite3.connect(db_path) as raw:
        claimed_without_message = raw.execute(
            "SELECT d.id FROM deliveries d LEFT JOIN inbox i ON i.delivery_id = d.id "
            "WHERE i.id IS NULL"
        ).fetchall()
        accepted = {str(row[0]) for row in raw.execute("SELECT delivery_id FROM inbox").fetchall()}
        twice = raw.execute(
            "SELECT delivery_id FROM inbox GROUP BY delivery_id HAVING COUNT(*) > 1"
        ).fetchall()
    assert claimed_without_message == []
    assert twice == []
    assert set(reported) <= accepted  # nothing reported as accepted is missing

    async with SqliteStore.open(db_path) as store:
        conversation = await store.get_conversation(INBOX_KEY)
        assert conversation is not None
        history = [s.message for s in (await store.load(conversation.id)).messages]
        pending = await store.pending(conversation.id)
    texts = [m.content for m in history if isinstance(m, UserMessage)]
    assert texts.count(BACKFILL_TEXT) == 1
    # Every accepted message is in history once or still pending, never both, never neither.
    delivered = [t for t in texts if t != BACKFILL_TEXT]
    waiting = [item.message.content for item in pending]
    assert len(delivered) == len(set(delivered))
    assert len(delivered) + len(waiting) == len(accepted)
    assert not set(map(str, delivered)) & set(map(str, waiting))
