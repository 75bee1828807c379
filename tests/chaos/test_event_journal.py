"""The Slack event journal on its own: what a dead process left is adopted once, a live
process's file is left alone, a torn line or a done event is not replayed, a poison event is
given up, and a journal whose events are all done is emptied."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from bots import journal as journal_module
from bots.journal import MAX_ATTEMPTS, EventJournal
from bots.recovery import OWNER


def body(n: int) -> dict[str, object]:
    return {"event_id": f"Ev{n}", "event": {"type": "app_mention", "text": f"m{n}"}}


def dead_owner() -> dict[str, object]:
    # A pid that is not running (the kernel's pid_max is below 2**22 by default).
    return {"host": OWNER["host"], "pid": 2**22 + 17, "start": "1"}


def write_orphan(directory: Path, name: str, owner: dict[str, object], lines: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("\n".join([json.dumps({"owner": owner}), *lines]) + "\n")
    return path


async def test_a_dead_process_s_undone_events_are_adopted_once_and_in_order(
    tmp_path: Path,
) -> None:
    lines = [
        json.dumps({"id": 1, "kind": "event", "attempt": 1, "event": body(1)}),
        json.dumps({"id": 2, "kind": "assistant", "attempt": 1, "event": body(2)}),
        json.dumps({"done": 1}),
        json.dumps({"id": 3, "kind": "event", "attempt": 1, "event": body(3)}),
        '{"id": 4, "kind": "event", "attem',  # torn: the process died writing it (not acked)
    ]
    orphan = write_orphan(tmp_path, "dead.jsonl", dead_owner(), lines)
    journal = EventJournal(tmp_path)
    replays = await journal.adopt_orphans()
    assert [(r.kind, r.body) for r in replays] == [("assistant", body(2)), ("event", body(3))]
    assert not orphan.exists()
    assert journal.outstanding == 2
    # Adopted durably: were this process killed now, the next one would find them here.
    assert await asyncio.to_thread(journal_module._undone, journal.path) == [
        ("assistant", body(2), 2),
        ("event", body(3), 2),
    ]
    assert await EventJournal(tmp_path).adopt_orphans() == []  # (its own file: not an orphan)
    await journal.close()


async def test_a_live_process_s_journal_is_left_alone(tmp_path: Path) -> None:
    live = {"host": OWNER["host"], "pid": os.getppid(), "start": None}
    line = json.dumps({"id": 1, "kind": "event", "attempt": 1, "event": body(1)})
    path = write_orphan(tmp_path, "live.jsonl", live, [line])
    journal = EventJournal(tmp_path)
    assert await journal.adopt_orphans() == []
    assert path.exists()
    await journal.close()


async def test_another_hosts_journal_is_adopted_only_once_it_has_been_still_for_long(
    tmp_path: Path,
) -> None:
    """A shared data directory: another machine's process cannot be asked whether it lives, so
    its file is left alone while it changes, and adopted once unchanged for ORPHAN_AGE_S."""
    elsewhere = {"host": f"not-{OWNER['host']}", "pid": os.getpid(), "start": OWNER["start"]}
    line = json.dumps({"id": 1, "kind": "event", "attempt": 1, "event": body(1)})
    path = write_orphan(tmp_path, "elsewhere.jsonl", elsewhere, [line])
    almost = time.time() - journal_module.ORPHAN_AGE_S + 60
    os.utime(path, (almost, almost))
    journal = EventJournal(tmp_path)
    assert await journal.adopt_orphans() == []
    assert path.exists()
    still = time.time() - journal_module.ORPHAN_AGE_S - 60
    os.utime(path, (still, still))
    assert [(r.kind, r.body) for r in await journal.adopt_orphans()] == [("event", body(1))]
    assert not path.exists()
    await journal.close()


async def test_a_journal_of_a_reused_pid_is_a_dead_process_s(tmp_path: Path) -> None:
    """The pid lives, but it is another process now (its start time differs): adopted."""
    reused = {"host": OWNER["host"], "pid": os.getppid(), "start": "not-its-start"}
    line = json.dumps({"id": 1, "kind": "event", "attempt": 1, "event": body(1)})
    path = write_orphan(tmp_path, "reused.jsonl", reused, [line])
    journal = EventJournal(tmp_path)
    assert [(r.kind, r.body) for r in await journal.adopt_orphans()] == [("event", body(1))]
    assert not path.exists()
    await journal.close()


async def test_an_event_that_keeps_killing_the_process_is_given_up(tmp_path: Path) -> None:
    line = json.dumps({"id": 1, "kind": "event", "attempt": MAX_ATTEMPTS, "event": body(1)})
    write_orphan(tmp_path, "dead.jsonl", dead_owner(), [line])
    journal = EventJournal(tmp_path)
    assert await journal.adopt_orphans() == []
    await journal.close()


async def test_done_events_are_not_replayed_and_a_done_journal_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "TRUNCATE_AT_BYTES", 200)
    journal = EventJournal(tmp_path)
    entries = await asyncio.gather(*(journal.record("event", body(n)) for n in range(20)))
    assert sorted(entries) == list(range(1, 21))
    for entry in entries[:-1]:
        await journal.done(entry)
    assert [b for _, b, _ in journal_module._undone(journal.path)] == [body(19)]
    await journal.done(entries[-1])
    await journal.record("event", body(99))  # the next write finds everything done
    assert journal.path.stat().st_size < 400
    assert [b for _, b, _ in journal_module._undone(journal.path)] == [body(99)]
    await journal.close()
    assert journal.path.exists()  # one event is not done: the next start adopts it


async def test_a_journal_closed_with_everything_done_is_removed(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path)
    entry = await journal.record("event", body(1))
    await journal.done(entry)
    await journal.close()
    assert not journal.path.exists()


async def test_events_written_down_together_are_acknowledged_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit without a queue behind it: the events that arrived while an fsync ran
    share the next fsync and all resume in the same turn of the event loop. (Under a flood a
    busy loop's turn takes a long while; the journal used to release the events of one
    commit one per turn through its lock, and past 2 s the rest were refused.)"""
    journal = EventJournal(tmp_path)
    await journal.open()
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def first_fsync_held(fd: int) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", first_fsync_held)
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count_turns())
    acknowledged_at: dict[int, int] = {}

    async def event(n: int) -> None:
        await journal.record("event", body(n))
        acknowledged_at[n] = turns

    first = asyncio.create_task(event(0))
    await asyncio.to_thread(entered.wait, 30)  # the first commit is running
    waiting = [asyncio.create_task(event(n)) for n in range(1, 41)]
    for _ in range(5):
        await asyncio.sleep(0)  # they all arrive while it runs
    release.set()
    await asyncio.gather(first, *waiting)
    counter.cancel()
    assert len({acknowledged_at[n] for n in range(1, 41)}) <= 2
    assert [b for _, b, _ in journal_module._undone(journal.path)] == [body(n) for n in range(41)]
    await journal.close()


async def test_a_process_killed_with_events_undone_leaves_a_journal_the_next_one_adopts(
    tmp_path: Path,
) -> None:
    """A real process records two events, marks one done and dies without closing: the next
    process finds its file (by name, by header) and replays the undone one, at attempt 2."""
    script = (
        "import asyncio, os, sys\n"
        "from pathlib import Path\n"
        "from bots.journal import EventJournal\n"
        "async def main():\n"
        "    journal = EventJournal(Path(sys.argv[1]))\n"
        "    first = await journal.record('event', {'event_id': 'Ev1'})\n"
        "    await journal.record('event', {'event_id': 'Ev2'})\n"
        "    await journal.done(first)\n"
        "    os._exit(0)  # no close: as a crash leaves it\n"
        "asyncio.run(main())\n"
    )
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(tmp_path))
    assert await child.wait() == 0
    [left] = await asyncio.to_thread(lambda: list(tmp_path.glob("*")))
    assert left.suffix == ".jsonl" and all(c.isalnum() or c in "_.-" for c in left.name)
    journal = EventJournal(tmp_path)
    replays = await journal.adopt_orphans()
    assert [(r.kind, r.body) for r in replays] == [("event", {"event_id": "Ev2"})]
    assert journal_module._undone(journal.path) == [("event", {"event_id": "Ev2"}, 2)]
    await journal.close()


async def test_an_event_recorded_is_written_at_its_first_attempt(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path)
    await journal.record("event", body(1))
    assert journal_module._undone(journal.path) == [("event", body(1), 1)]
    await journal.close()


async def test_a_done_after_close_leaves_the_event_to_be_replayed(tmp_path: Path) -> None:
    """Work that ends after the journal closed (a shutdown's stragglers) writes nothing: the
    event stays undone in the file, for the next process to replay and the store to de-dup."""
    journal = EventJournal(tmp_path)
    entry = await journal.record("event", body(1))
    await journal.close()
    await journal.done(entry)
    assert journal_module._undone(journal.path) == [("event", body(1), 1)]


async def test_an_event_that_cannot_be_written_down_is_refused(tmp_path: Path) -> None:
    """Where the journal cannot write (its directory is a file: read-only, full or gone
    alike), `record` raises: the event is not acknowledged as if it were safe."""
    blocked = tmp_path / "journal"
    blocked.write_text("not a directory")
    journal = EventJournal(blocked)
    with pytest.raises(OSError):
        await journal.record("event", body(1))
    assert journal.outstanding == 0
    with contextlib.suppress(OSError):  # (nor can it remove its file on the way out)
        await journal.close()


async def test_an_orphan_another_adopter_took_first_is_skipped_and_the_rest_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes adopt at once: the file the other renamed first is gone by the time this
    one renames it; this one goes on to the next orphan instead of stopping."""
    line = json.dumps({"id": 1, "kind": "event", "attempt": 1, "event": body(2)})
    write_orphan(tmp_path, "b-dead.jsonl", dead_owner(), [line])
    taken = tmp_path / "a-dead.jsonl"  # listed, then renamed away by the other adopter
    listed = EventJournal._orphan_files
    monkeypatch.setattr(EventJournal, "_orphan_files", lambda self: [taken, *listed(self)])
    journal = EventJournal(tmp_path)
    assert [(r.kind, r.body) for r in await journal.adopt_orphans()] == [("event", body(2))]
    await journal.close()
