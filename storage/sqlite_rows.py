"""Rows to records for the SQLite store, and the column lists its statements share.

Owns: turning rows into `storage.base` records (and records into column values). Pure
functions: no SQL runs here.

Must not: touch a connection; import `tools` or `bots`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast, get_args

from core.messages import Usage, load_message
from storage.base import (
    Conversation,
    InboxItem,
    RunOutcome,
    RunRecord,
    SchemaError,
)

OUTCOMES: frozenset[str] = frozenset(get_args(RunOutcome))

CONVERSATION_COLUMNS = "id, key, channel_key, title, settings, created_at, updated_at"
RUN_COLUMNS = (
    "r.id, r.conversation_id, c.key, r.outcome, r.started_at, r.finished_at, r.user_id, "
    "r.channel_key, r.model, r.error, r.surface_ref, r.owner"
)
USAGE_SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), "
    "COALESCE(SUM(cost_usd), 0.0)"
)


def dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


def run_record(row: Sequence[Any]) -> RunRecord:
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


def load_json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise SchemaError(f"a stored configuration is not a JSON object: {text[:80]!r}")
    return value
