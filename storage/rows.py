"""Rows to records, the same on every backend, and the column lists both backends select.

Owns: turning rows into `storage.base` records (and records into column values): conversations,
inbox items, compactions, messages, runs and their usage, a channel's memory notes and
schedules. Both drivers hand back rows indexable by position, and JSON columns as text (the
PostgreSQL pool sets no codec), so one function serves both. Pure functions: no SQL runs here.

Must not: touch a connection or know a driver; write SQL beyond the column lists; import
`tools` or `bots`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from typing import Any, cast, get_args

from core.messages import Usage, load_message
from storage.base import (
    Compaction,
    Conversation,
    InboxItem,
    MemoryNote,
    RunOutcome,
    RunRecord,
    Schedule,
    SchemaError,
    StoredMessage,
)

OUTCOMES: frozenset[str] = frozenset(get_args(RunOutcome))

CONVERSATION_COLUMNS = "id, key, channel_key, title, settings, created_at, updated_at"
USAGE_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_usd), 0.0)"
)
NOTE_COLUMNS = "id, channel_key, text, created_by, created_at"
SCHEDULE_COLUMNS = (
    "id, channel_key, prompt, cron, timezone, state, next_run_at, last_run_at, "
    "created_by, created_by_name, created_at, pending_due_at, pending_since, pending_attempts"
)


def dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise SchemaError(f"a stored configuration is not a JSON object: {text[:80]!r}")
    return value


def conversation_from(row: Sequence[Any]) -> Conversation:
    """A row that starts with `CONVERSATION_COLUMNS`."""
    return Conversation(
        id=int(row[0]),
        key=str(row[1]),
        channel_key=str(row[2]),
        title=row[3],
        settings=json.loads(row[4]),
        created_at=float(row[5]),
        updated_at=float(row[6]),
    )


def inbox_item(conversation_id: int, row: Sequence[Any]) -> InboxItem:
    """An inbox row as `(id, body, surface_ref, received_at)`."""
    return InboxItem(
        id=int(row[0]),
        conversation_id=conversation_id,
        message=load_message(row[1]),
        surface_ref=json.loads(row[2]),
        received_at=float(row[3]),
    )


def compaction_from(conversation_id: int, row: Sequence[Any]) -> Compaction:
    """`(id, summary, up_to_seq, details, created_at)`."""
    return Compaction(
        id=int(row[0]),
        conversation_id=conversation_id,
        summary=str(row[1]),
        up_to_seq=int(row[2]),
        created_at=float(row[4]),
        details=json.loads(row[3]),
    )


def stored_messages(rows: Sequence[Sequence[Any]]) -> list[StoredMessage]:
    """`(seq, body)` rows, parsed with the cyclic GC paused (as `sqlite_conversations` loads:
    nothing here forms cycles, and its passes over a big heap would double a long load)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [StoredMessage(seq=int(row[0]), message=load_message(row[1])) for row in rows]
    finally:
        if was_enabled:
            gc.enable()


def run_record(row: Sequence[Any]) -> RunRecord:
    """A run's row: its fields as each backend selects them, then its five usage columns."""
    outcome = str(row[3])
    if outcome not in OUTCOMES:
        raise SchemaError(f"run {row[0]} has an unknown outcome {outcome!r}")
    return RunRecord(
        id=int(row[0]),
        conversation_id=int(row[1]),
        conversation_key=str(row[2]),
        outcome=cast(RunOutcome, outcome),
        started_at=float(row[4]),
        finished_at=None if row[5] is None else float(row[5]),
        user_id=row[6],
        channel_key=row[7],
        model=row[8],
        error=row[9],
        surface_ref=json.loads(row[10]),
        owner=json.loads(row[11]),
        usage=usage_of(row[12:17]),
    )


def usage_of(row: Sequence[Any]) -> Usage:
    return Usage(
        input=int(row[0]),
        output=int(row[1]),
        cache_read=int(row[2]),
        cache_write=int(row[3]),
        cost=float(row[4]),
    )


def note_from(row: Any) -> MemoryNote:
    """A row of `NOTE_COLUMNS`."""
    return MemoryNote(
        id=int(row[0]),
        channel_key=str(row[1]),
        text=str(row[2]),
        created_by=None if row[3] is None else str(row[3]),
        created_at=float(row[4]),
    )


def schedule_from(row: Any) -> Schedule:
    """A row of `SCHEDULE_COLUMNS`."""
    return Schedule(
        id=int(row[0]),
        channel_key=str(row[1]),
        prompt=str(row[2]),
        cron=None if row[3] is None else str(row[3]),
        timezone=str(row[4]),
        state=row[5],
        next_run_at=None if row[6] is None else float(row[6]),
        last_run_at=None if row[7] is None else float(row[7]),
        created_by=str(row[8]),
        created_by_name=str(row[9]),
        created_at=float(row[10]),
        pending_due_at=None if row[11] is None else float(row[11]),
        pending_since=None if row[12] is None else float(row[12]),
        pending_attempts=int(row[13]),
    )
