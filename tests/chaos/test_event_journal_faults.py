"""The event journal where disks, locales and processes misbehave: each event is on disk
before it is acknowledged (and a "done" costs no fsync), a write that fails part-way does not
spoil the next event, truncation keeps the owner line, a damaged file is adopted for what it
holds, a process that never closes its journal still exits, and the file is UTF-8 whatever
the locale (Linux: the tests read /proc/self/fd and set a C locale). Each pins what the
journal's mutation sample found no test noticing (issue 24)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bots import journal as journal_module
from bots.journal import EventJournal
from bots.recovery import OWNER
from tests.chaos.test_event_journal import body, dead_owner, write_orphan

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 60.0  # a hang guard, not a speed check
# An ASCII locale with neither of Python's UTF-8 rescues (PEP 538 coercion, PEP 540 mode):
# `open()` without an encoding would write and read ASCII here.
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
SAID = "café ✓ 日本語 — déjà vu"


class Fsyncs:
    """Counts fsyncs of the journal's own file (the directory's are not the events')."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.count = 0
        real = os.fsync

        def counting(fd: int) -> None:
            if os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()):
                self.count += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", counting)


async def test_each_event_is_fsynced_before_it_is_acknowledged_and_a_done_costs_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = EventJournal(tmp_path)
    await journal.open()
    fsyncs = Fsyncs(monkeypatch, journal.path)
    entries = []
    for n in range(3):  # one at a time: each waits for its own fsync
        entries.append(await journal.record("event", body(n)))
        assert fsyncs.count == n + 1
    for entry in entries[:2]:  # not the last: that one may also truncate the file
        await journal.done(entry)
    assert fsyncs.count == 3  # a lost "done" only replays a duplicate: never worth an fsync
    await journal.close()


class FailingOnce:
    """The journal's file, whose next write puts half its text on disk, then fails (a disk
    that fills up mid-write)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.failed = False

    def write(self, text: str) -> int:
        if not self.failed:
            self.failed = True
            self.real.write(text[: len(text) // 2])
            self.real.flush()
            raise OSError(28, "No space left on device")
        return int(self.real.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def test_a_write_that_fails_part_way_leaves_the_next_event_whole(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path)
    await journal.open()
    writer = journal._writer
    assert writer is not None and writer._file is not None
    writer._file = FailingOnce(writer._file)
    with pytest.raises(OSError, match="No space left"):
        await journal.record("event", body(1))  # refused: never acknowledged
    await journal.record("event", body(2))  # room again
    # A replay finds the second event whole: it starts on a line of its own, not glued to
    # the half line the failed write left.
    assert journal_module._undone(journal.path) == [("event", body(2), 1)]
    await journal.close()


async def test_a_truncated_journal_keeps_its_owner_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file without its owner line is never adopted by anyone: an undone event after a
    # truncation would be lost with its process.
    monkeypatch.setattr(journal_module, "TRUNCATE_AT_BYTES", 400)
    journal = EventJournal(tmp_path)
    for n in range(8):
        await journal.done(await journal.record("event", body(n)))
    assert journal.path.stat().st_size < 400  # emptied of the done events
    await journal.record("event", body(99))
    assert journal_module._owner_of(journal.path) == OWNER
    assert journal_module._undone(journal.path) == [("event", body(99), 1)]
    await journal.close()


async def test_a_damaged_journal_is_adopted_for_what_it_holds(tmp_path: Path) -> None:
    lines = [
        json.dumps({"done": 77}),  # the done of an event the file does not have
        "not json at all",
        json.dumps(["an", "array"]),
        json.dumps({"id": 1, "event": body(1)}),  # no kind, no attempt
        json.dumps({"id": 2, "kind": "", "attempt": "two", "event": body(2)}),
        json.dumps({"id": 3, "kind": "assistant", "attempt": 1, "event": "not an object"}),
    ]
    write_orphan(tmp_path, "damaged.jsonl", dead_owner(), lines)
    journal = EventJournal(tmp_path)
    replays = await journal.adopt_orphans()
    assert [(r.kind, r.body) for r in replays] == [("event", body(1)), ("event", body(2))]
    assert journal_module._undone(journal.path) == [
        ("event", body(1), 2),
        ("event", body(2), 2),
    ]
    await journal.close()


async def test_a_journal_in_a_data_directory_not_made_yet(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path / "data" / "journal" / "slack")
    await journal.record("event", body(1))
    assert journal_module._undone(journal.path) == [("event", body(1), 1)]
    await journal.close()


async def test_a_journal_keeps_one_file_open_however_many_events(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path)
    await asyncio.gather(*(journal.record("event", body(n)) for n in range(40)))
    for n in range(40):
        await journal.record("event", body(100 + n))
    assert await asyncio.to_thread(_open_descriptors, journal.path) == 1
    await journal.close()


def _open_descriptors(path: Path) -> int:
    target = str(path.resolve())
    return sum(
        os.path.realpath(f"/proc/self/fd/{fd}") == target for fd in os.listdir("/proc/self/fd")
    )


async def _child(script: str, *args: str) -> str:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        cwd=ROOT,
        env={**os.environ, **ASCII_LOCALE, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), LIMIT_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise AssertionError("the process never exited (the journal's thread kept it)") from None
    assert child.returncode == 0, err.decode(errors="replace")
    return out.decode()


async def test_a_process_that_never_closes_its_journal_exits_and_the_file_is_utf8(
    tmp_path: Path,
) -> None:
    # Returns from main without closing the journal (an error path, a forgotten close): the
    # process still ends. In an ASCII locale the event's text is written and read as UTF-8.
    await _child(
        "import asyncio, json, sys\n"
        "from pathlib import Path\n"
        "from bots.journal import EventJournal\n"
        "async def main():\n"
        "    journal = EventJournal(Path(sys.argv[1]))\n"
        "    await journal.record('event', {'text': json.loads(sys.argv[2])})\n"
        "asyncio.run(main())\n",
        str(tmp_path),
        json.dumps(SAID),  # (ASCII on the command line: the locale is ASCII)
    )
    [left] = await asyncio.to_thread(lambda: list(tmp_path.glob("*.jsonl")))
    assert SAID in left.read_text(encoding="utf-8")
    journal = EventJournal(tmp_path)  # the next process adopts it
    assert [r.body for r in await journal.adopt_orphans()] == [{"text": SAID}]
    # ... and one in an ASCII locale reads it back whole.
    read = await _child(
        "import json, sys\n"
        "from pathlib import Path\n"
        "from bots.journal import _undone\n"
        "print(json.dumps([event for _, event, _ in _undone(Path(sys.argv[1]))]))\n",
        str(journal.path),
    )
    assert json.loads(read) == [{"text": SAID}]
    await journal.close()
