"""The journal of Slack events acknowledged but not yet handed to the runner.

Why: Slack never delivers an acknowledged event again, and between the acknowledgement and
the store's accepting transaction lies slow work (the author's name, file downloads, the
thread's backfill: Web API calls that can take longer than Slack's 3 seconds together). A
process killed there would lose the message. Two ways out: accept before acknowledging (but
the accept needs that slow work, so the ack could miss its 3 s), or write the raw event down
durably before acknowledging and replay it after a crash. This is the second: one fsynced
line per event, the ack sent after it (the listener returns once `record` has returned), a
"done" line once the event's work is over. Replaying is safe because accepting is
idempotent: the message's delivery ids are claimed in the accepting transaction, so an event
replayed after it was accepted is a duplicate and dropped.

Owns: `EventJournal`: this process's file (`<dir>/<host>-<pid>-<start>.jsonl`, a header line
naming its owner), group commit (events arriving together share one fsync), truncation once
every event in it is done, and adopting what dead processes left (`adopt_orphans`: their
undone events are re-recorded here, then their file is removed). A file whose owner is a live
process on this host is never touched; one from another host (a shared data directory) is
adopted once it has not changed for `ORPHAN_AGE_S`.

Must not: know what an event means (the listeners do), or block the event loop (file work
runs in a thread).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bots.recovery import OWNER, owner_alive

log = logging.getLogger(__name__)

ORPHAN_AGE_S = 600.0  # another host's file, unchanged this long: its owner is gone
TRUNCATE_AT_BYTES = 1024 * 1024  # rewritten once everything in it is done and it is this big
MAX_LINE_BYTES = 8 * 1024 * 1024  # an event body is at most 4 MB (the HTTP server's limit)
MAX_ATTEMPTS = 3  # an event whose work crashed the process this often is given up
_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


@dataclass(slots=True, frozen=True)
class Replay:
    """An event a dead process acknowledged and did not hand over, now in this journal."""

    entry: int
    kind: str
    body: dict[str, Any]


class EventJournal:
    """See the module docstring. One per process; `open` before the first `record`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        owner = f"{OWNER['host']}-{OWNER['pid']}-{OWNER['start']}"
        self.path = directory / (_UNSAFE.sub("_", owner) + ".jsonl")
        self._ids = itertools.count(1)
        self._buffer: list[str] = []
        self._appended = 0  # lines handed to the buffer so far
        self._written = 0  # lines on disk (and fsynced, if a record was among them)
        self._outstanding: set[int] = set()
        self._lock = asyncio.Lock()
        self._file: Any = None
        self._closed = False

    @property
    def outstanding(self) -> int:
        """Events recorded and not yet done."""
        return len(self._outstanding)

    async def open(self) -> None:
        if self._file is None:
            self._file = await asyncio.to_thread(self._open_file)

    async def close(self) -> None:
        """Close the file; remove it if every event in it is done (else the next start
        adopts it)."""
        self._closed = True
        async with self._lock:
            if self._file is not None:
                file, self._file = self._file, None
                await asyncio.to_thread(file.close)
                if not self._outstanding:
                    await asyncio.to_thread(self.path.unlink, missing_ok=True)

    async def record(self, kind: str, body: dict[str, Any], *, attempt: int = 1) -> int:
        """Write the event down; returns once it is on disk (fsynced): acknowledge after."""
        entry = next(self._ids)
        line = json.dumps(
            {"id": entry, "kind": kind, "attempt": attempt, "event": body},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        self._outstanding.add(entry)  # with the line, no await between: truncation sees both
        self._buffer.append(line + "\n")
        self._appended += 1
        try:
            await self._flush(self._appended, sync=True)
        except BaseException:
            self._outstanding.discard(entry)
            raise
        return entry

    async def done(self, entry: int) -> None:
        """The event's work is over (answered, a duplicate, ignored): never replay it. Not
        fsynced: a lost "done" only replays an event the store then drops as a duplicate."""
        if entry not in self._outstanding or self._closed:
            return
        self._outstanding.discard(entry)
        self._buffer.append(json.dumps({"done": entry}) + "\n")
        self._appended += 1
        await self._flush(self._appended, sync=False)

    async def adopt_orphans(self) -> list[Replay]:
        """The undone events of dead processes' journals, recorded in this one (durably)
        before their files are removed: a crash while replaying loses nothing either."""
        await self.open()
        replays: list[Replay] = []
        for path in sorted(await asyncio.to_thread(self._orphan_files)):
            claimed = path.with_name(f".adopting-{self.path.name}-{path.name}")
            try:
                await asyncio.to_thread(os.rename, path, claimed)  # only one adopter wins
            except FileNotFoundError:
                continue
            for kind, body, attempt in await asyncio.to_thread(_undone, claimed):
                if attempt >= MAX_ATTEMPTS:
                    log.error(
                        "a Slack event was given up after %d attempts (event id %s)",
                        attempt,
                        body.get("event_id"),
                    )
                    continue
                entry = await self.record(kind, body, attempt=attempt + 1)
                replays.append(Replay(entry, kind, body))
            await asyncio.to_thread(claimed.unlink, missing_ok=True)
        return replays

    # -- file work, in a thread --------------------------------------------------------------

    async def _flush(self, upto: int, *, sync: bool) -> None:
        """Group commit: whoever holds the lock writes every line buffered so far."""
        async with self._lock:
            if self._written >= upto:
                return
            if self._file is None:
                self._file = await asyncio.to_thread(self._open_file)
            lines, self._buffer = self._buffer, []
            count = self._appended
            truncate = not self._outstanding
            await asyncio.to_thread(self._write, lines, sync, truncate)
            self._written = count

    def _open_file(self) -> Any:
        self.directory.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open; closed in close)
        if file.tell() == 0:
            file.write(json.dumps({"owner": OWNER}) + "\n")
            file.flush()
            os.fsync(file.fileno())
            _fsync_directory(self.directory)
        return file

    def _write(self, lines: list[str], sync: bool, truncate: bool) -> None:
        file = self._file
        if truncate and file.tell() >= TRUNCATE_AT_BYTES:
            # Everything in it is done (and nothing is buffered but "done" lines).
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"owner": OWNER}) + "\n")
            lines = []
        file.write("".join(lines))
        file.flush()
        if sync:
            os.fsync(file.fileno())

    def _orphan_files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        found: list[Path] = []
        now = time.time()
        for path in self.directory.glob("*.jsonl"):
            if path == self.path:
                continue
            owner = _owner_of(path)
            if owner is None:
                continue
            if owner_alive(owner):
                other_host = owner.get("host") != OWNER["host"]
                try:
                    stale = now - path.stat().st_mtime > ORPHAN_AGE_S
                except FileNotFoundError:
                    continue
                if not (other_host and stale):
                    continue
            found.append(path)
        return found


def _owner_of(path: Path) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as file:
            header = json.loads(file.readline(MAX_LINE_BYTES) or "null")
    except (OSError, ValueError):
        return None
    owner = header.get("owner") if isinstance(header, dict) else None
    return owner if isinstance(owner, dict) else None


def _undone(path: Path) -> list[tuple[str, dict[str, Any], int]]:
    """(kind, body, attempt) of every event in `path` without its "done" line, in order. A
    torn last line (the process died writing it) was never acknowledged: skipped."""
    events: dict[int, tuple[str, dict[str, Any], int]] = {}
    with open(path, encoding="utf-8", errors="replace") as file:
        for line in iter(lambda: file.readline(MAX_LINE_BYTES), ""):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if isinstance(item.get("done"), int):
                events.pop(item["done"], None)
            elif isinstance(item.get("id"), int) and isinstance(item.get("event"), dict):
                attempt = item.get("attempt")
                events[item["id"]] = (
                    str(item.get("kind") or "event"),
                    item["event"],
                    attempt if isinstance(attempt, int) else 1,
                )
    return list(events.values())


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
