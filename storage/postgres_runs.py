"""The SQL of runs, on PostgreSQL.

Owns: the calls behind `start_run` (a run and its first messages delivered: ONE statement),
`finish_run` (the first finish wins), `set_run_surface_ref` and `running_runs`, each run by
`PostgresStore` on one pooled connection. The statements several methods share are
`postgres_statements`.

Must not: acquire connections or open transactions; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import asyncpg

from core.messages import Message, Usage
from storage import postgres_fencing as fencing
from storage import postgres_statements as pg_statements
from storage import rows
from storage.records import Fence, FencedOut, RunRecord


@dataclass(frozen=True, slots=True)
class StartRunCall:
    conversation_id: int
    user_id: str | None
    channel_key: str | None  # None: the conversation's
    model: str | None
    surface_json: str
    owner_json: str
    deliver: list[int]  # inbox items delivered to the run in the same statement
    known: dict[int, Message]  # their messages this store still holds: not parsed again
    now: float
    fence: Fence | None = None  # the lease the run starts under: written only while it holds


def _started(call: StartRunCall, run_id: int, key: str, channel_key: str | None) -> RunRecord:
    # A new run has no ledger entries yet: its usage is zero without asking.
    return RunRecord(
        id=run_id,
        conversation_id=call.conversation_id,
        conversation_key=key,
        outcome="running",
        started_at=call.now,
        finished_at=None,
        user_id=call.user_id,
        channel_key=channel_key,
        model=call.model,
        usage=Usage(),
        error=None,
        surface_ref=json.loads(call.surface_json),
        owner=json.loads(call.owner_json),
    )


async def start(connection: asyncpg.Connection, call: StartRunCall) -> RunRecord:
    if call.deliver:  # the run and its first messages: one statement
        row = await connection.fetchrow(
            pg_statements.START_RUN_DELIVERING,
            call.conversation_id,
            call.deliver,
            call.now,
            call.user_id,
            call.channel_key,
            call.model,
            call.surface_json,
            call.owner_json,
            *fencing.args(call.fence),
        )
        pg_statements.delivered(call.conversation_id, row, call.known)
        assert row is not None
        return _started(call, int(row[1]), str(row[3]), row[2])
    row = await connection.fetchrow(
        "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, "
        "model, surface_ref, owner) "
        "SELECT id, 'running', $2, $3, COALESCE($4, channel_key), $5, $6::jsonb, "
        f"$7::jsonb FROM conversations WHERE id = $1 AND {fencing.held('$1', '$8', '$9')} "
        "RETURNING id, channel_key, (SELECT key FROM conversations WHERE id = $1)",
        call.conversation_id,
        call.now,
        call.user_id,
        call.channel_key,
        call.model,
        call.surface_json,
        call.owner_json,
        *fencing.args(call.fence),
    )
    if row is None and call.fence is not None:  # a fence exists only for a known conversation
        raise FencedOut(call.conversation_id, "starting a run")
    if row is None:
        raise KeyError(f"no conversation with id {call.conversation_id}")
    return _started(call, int(row[0]), str(row[2]), row[1])


async def finish(
    connection: asyncpg.Connection,
    run_id: int,
    outcome: str,
    error: str | None,
    now: float,
    fence: Fence | None = None,
) -> RunRecord:
    row = await connection.fetchrow(
        pg_statements.FINISH_RUN, outcome, error, now, run_id, *fencing.args(fence)
    )
    if row is None:  # finished already (the first finish wins), unknown, or fenced out
        await fencing.refuse_if_lost(connection, fence, "finishing a run")
        return await pg_statements.run_by_id(connection, run_id)
    return rows.run_record(row)


async def set_surface_ref(
    connection: asyncpg.Connection, run_id: int, ref_json: str, fence: Fence | None = None
) -> RunRecord:
    # One statement: a run's ref changes a few times per answer (its messages posted).
    row = await connection.fetchrow(
        pg_statements.SET_SURFACE_REF, ref_json, run_id, *fencing.args(fence)
    )
    if row is None:
        await fencing.refuse_if_lost(connection, fence, "storing where a run is shown")
        raise KeyError(f"no run with id {run_id}")
    return rows.run_record(row)


async def running(connection: asyncpg.Connection) -> list[RunRecord]:
    """Runs still marked running, oldest first."""
    found = await connection.fetch(
        f"{pg_statements.RUN_SELECT} WHERE r.outcome = 'running' ORDER BY r.started_at, r.id"
    )
    return [rows.run_record(row) for row in found]
