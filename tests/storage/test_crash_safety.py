"""SIGKILL a writer mid-stream, many times: every committed message survives, nothing torn."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
from pathlib import Path

from storage.sqlite import SqliteStore
from tests.storage.crash_writer import CONVERSATION_KEY, expected_message

REPO_ROOT = Path(__file__).resolve().parents[2]
KILLS = 20


async def kill_writer_at_a_random_moment(db_path: Path, rng: random.Random, log: Path) -> list[int]:
    """Start the writer, SIGKILL it, and return the seqs it reported as committed."""
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.storage.crash_writer",
            str(db_path),
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
    return [int(line) for line in lines if line != b"ready"]


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
