"""The SQL of a channel's memory on SQLite.

Owns: the calls behind `memory_notes`, `add_memory_note`, `forget_memory_note` and
`clear_memory`, as `Op`s the store's batcher runs (their statements are `storage.statements`,
shared with PostgreSQL). A bounded add checks and inserts inside one transaction (SQLite has
one writer, so nothing interleaves).

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from storage import statements
from storage.base import MemoryFull, MemoryNote
from storage.batching import Op
from storage.rows import note_from
from storage.sqlite_ops import Db, fetchall, fetchone


async def read_notes(db: Db, channel_key: str) -> list[MemoryNote]:
    found = await fetchall(db, statements.NOTES.sqlite, (channel_key,))
    return [note_from(row) for row in found]


# (channel_key, text, by, max_notes, max_chars, now)
AddNoteCall = tuple[str, str, str | None, int, int, float]


async def _add_note(db: Db, call: AddNoteCall) -> MemoryNote:
    channel_key, text, by, max_notes, max_chars, now = call
    count, chars = await fetchone(db, statements.NOTES_HELD.sqlite, (channel_key,))
    if int(count) + 1 > max_notes or int(chars) + len(text) > max_chars:
        raise MemoryFull(f"the channel's memory holds {int(count)} notes, {int(chars)} characters")
    row = await fetchone(db, statements.ADD_NOTE.sqlite, (channel_key, text, by, now))
    return note_from(row)


ADD_NOTE: Op[Db, AddNoteCall, MemoryNote] = Op("add_memory_note", one=_add_note)


async def _forget_note(db: Db, call: tuple[str, int]) -> bool:
    found = await fetchall(db, statements.FORGET_NOTE.sqlite, call)
    return bool(found)


FORGET_NOTE: Op[Db, tuple[str, int], bool] = Op(
    "forget_memory_note", one=_forget_note, lone=_forget_note
)


async def _clear(db: Db, channel_key: str) -> int:
    found = await fetchall(db, statements.CLEAR_MEMORY.sqlite, (channel_key,))
    return len(found)


CLEAR_MEMORY: Op[Db, str, int] = Op("clear_memory", one=_clear, lone=_clear)
