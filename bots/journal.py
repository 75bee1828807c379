"""The journal of platform events acknowledged but not yet handed to the runner: Slack's
events (`bots.platforms.slack.listeners`) and Discord's `/ask` (`bots.platforms.discord.ask_cog`:
deferred only once written down, the defer being its acknowledgement).

Why (Slack's case): Slack never delivers an acknowledged event again, and between the
acknowledgement and the store's accepting transaction lies slow work (the author's name,
file downloads, the thread's backfill: Web API calls that can take longer than Slack's 3
seconds together). A process killed there would lose the message. Two ways out: accept
before acknowledging (but the accept needs that slow work, so the ack could miss its 3 s),
or write the raw event down durably before acknowledging and replay it after a crash. This
is the second: one fsynced line per event, the ack sent after it (the listener returns once
`record` has returned), a "done" line once the event's work is over. Replaying is safe
because accepting is idempotent: the message's delivery ids are claimed in the accepting
transaction, so an event replayed after it was accepted is a duplicate and dropped.

Owns: `EventJournal`: this journal's file (`<dir>/<host>-<pid>-<start>-<n>.jsonl`, a header
line naming its owner), group commit (the events that arrive while one fsync runs share the
next, written by the journal's own thread: see `_Writer`), truncation once every event in
it is done, and adopting what dead processes left (`adopt_orphans`: their undone events are
re-recorded here, then their file is removed). A file whose owner is a live process on this
host is never touched; one from another host (a shared data directory) is adopted once it
has not changed for `ORPHAN_AGE_S`.

Must not: know what an event means (the listeners do), or block the event loop (file work
runs in the journal's thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import re
import threading
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
_JOURNALS = itertools.count(1)


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
        # One file per journal (a process may have several: shards, tests): the header names
        # the owner, so another journal of a live owner is never adopted.
        owner = f"{OWNER['host']}-{OWNER['pid']}-{OWNER['start']}-{next(_JOURNALS)}"
        self.path = directory / (_UNSAFE.sub("_", owner) + ".jsonl")
        self._ids = itertools.count(1)
        self._outstanding: set[int] = set()
        self._closed = False
        self._writer: _Writer | None = None

    @property
    def outstanding(self) -> int:
        """Events recorded and not yet done."""
        return len(self._outstanding)

    async def open(self) -> None:
        await self._started().submit(durable=True)

    async def close(self) -> None:
        """Write what is queued and close the file; remove it if every event in it is done
        (else the next start adopts it)."""
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.stop(remove=not self._outstanding)

    async def record(self, kind: str, body: dict[str, Any], *, attempt: int = 1) -> int:
        """Write the event down; returns once it is on disk (fsynced): acknowledge after."""
        entry = next(self._ids)
        line = json.dumps(
            {"id": entry, "kind": kind, "attempt": attempt, "event": body},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        self._outstanding.add(entry)  # with the line, no await between: truncation sees both
        try:
            await self._started().submit(line + "\n", durable=True)
        except BaseException:
            self._outstanding.discard(entry)
            raise
        return entry

    async def done(self, entry: int) -> None:
        """The event's work is over (answered, a duplicate, ignored): never replay it.
        Written, not fsynced: a lost "done" only replays an event the store then drops as a
        duplicate (so a failed write is only logged)."""
        if entry not in self._outstanding or self._closed:
            return
        self._outstanding.discard(entry)
        line = json.dumps({"done": entry}) + "\n"
        # With the last outstanding event done, everything queued before the marker is done.
        items = (line,) if self._outstanding else (line, _MAY_TRUNCATE)
        try:
            await self._started().submit(*items, durable=False)
        except OSError as exc:
            log.warning("an event's done line was not written (%s): it may be replayed", exc)

    def _started(self) -> _Writer:
        if self._writer is None:
            self._writer = _Writer(self.directory, self.path, asyncio.get_running_loop())
        return self._writer

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
                        "an event (%s) was given up after %d attempts (id %s)",
                        kind,
                        attempt,
                        body.get("event_id") or body.get("id"),
                    )
                    continue
                entry = await self.record(kind, body, attempt=attempt + 1)
                replays.append(Replay(entry, kind, body))
            await asyncio.to_thread(claimed.unlink, missing_ok=True)
        return replays

    # -- file work, in a thread --------------------------------------------------------------

    def _orphan_files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        found: list[Path] = []
        now = time.time()
        for path in self.directory.glob("*.jsonl"):
            if path == self.path:
                continue
            owner = _owner_of(path)
            if owner is None or owner == OWNER:  # (another journal of this process: live)
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


_MAY_TRUNCATE = object()  # queued when the last outstanding event is done
_STOP = object()


@dataclass(slots=True, frozen=True)
class _Written:
    """Queued after lines whose caller waits for their write but not for an fsync."""

    waiter: asyncio.Future[None]


class _Writer:
    """The journal's own thread: it takes everything queued since its last write, writes it,
    fsyncs once if a record is among it, and wakes that write's records in one callback on
    the event loop. Why a thread of its own: group commit then needs no turn of the event
    loop between two fsyncs (a busy loop's turn is long under a flood), no lock that wakes
    its waiters one turn at a time, and no place in the shared thread pool's queue."""

    def __init__(self, directory: Path, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self._directory = directory
        self._path = path
        self._loop = loop
        self._queue: list[object] = []  # lines, markers, waiters: futures (fsync first), _Written
        self._ready = threading.Condition()
        self._file: Any = None
        self._torn = False  # a write failed part-way: start the next on a fresh line
        self._remove = False
        self._stopped: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(target=self._run, name="event-journal", daemon=True)
        self._thread.start()

    async def submit(self, *items: object, durable: bool) -> None:
        """Queue `items` (lines, markers); return once they are written and, if `durable`,
        fsynced (with everything queued before them)."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        with self._ready:
            self._queue.extend(items)
            self._queue.append(waiter if durable else _Written(waiter))
            self._ready.notify()
        await waiter

    async def stop(self, *, remove: bool) -> None:
        with self._ready:
            self._remove = remove
            self._queue.append(_STOP)
            self._ready.notify()
        await asyncio.shield(self._stopped)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                batch, self._queue = self._queue, []
            stopping = _STOP in batch
            durable = [item for item in batch if isinstance(item, asyncio.Future)]
            waiters = durable + [item.waiter for item in batch if isinstance(item, _Written)]
            error: BaseException | None = None
            try:
                self._write(batch, sync=bool(durable))
            except Exception as exc:  # disk full, read-only: these events are refused
                self._torn = True
                error = exc
            self._wake(waiters, error)
        error = None
        try:
            if self._file is not None:
                self._file.close()
            if self._remove:
                self._path.unlink(missing_ok=True)
        except OSError as exc:
            error = exc
        self._wake([self._stopped], error)

    def _wake(self, waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
        if not waiters:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(_settle, waiters, error)

    def _write(self, batch: list[object], *, sync: bool) -> None:
        file = self._file
        if file is None:
            file = self._file = self._open_file()
        parts: list[str] = ["\n"] if self._torn else []
        for item in batch:
            if isinstance(item, str):
                parts.append(item)
            elif item is _MAY_TRUNCATE and file.tell() + sum(map(len, parts)) >= TRUNCATE_AT_BYTES:
                # Every event queued before the marker is done: drop all of it.
                file.seek(0)
                file.truncate()
                parts = [json.dumps({"owner": OWNER}) + "\n"]
        file.write("".join(parts))
        file.flush()
        self._torn = False
        if sync:
            os.fsync(file.fileno())

    def _open_file(self) -> Any:
        self._directory.mkdir(parents=True, exist_ok=True)
        file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 (kept open; closed in _run)
        if file.tell() == 0:
            file.write(json.dumps({"owner": OWNER}) + "\n")
            file.flush()
            os.fsync(file.fileno())
            _fsync_directory(self._directory)
        return file


def _settle(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue  # its record was cancelled (refused): it is written all the same
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)


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
