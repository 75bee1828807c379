"""The SQL of runs, on SQLite.

Owns: the calls behind `start_run` (alone, delivering its inbox items in the same
transaction, and for the runner's every answer, a run delivering one item, in ONE
`INSERT INTO teammate_start ... RETURNING`: `sqlite_triggers`), `finish_run` and
`set_run_surface_ref`, as `Op`s the store's batcher runs; the read behind `running_runs`; and
`RUN_FIELDS`, a run's columns as `rows.run_record` reads them.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.messages import Usage
from storage import rows
from storage.batching import Op
from storage.records import RunRecord
from storage.sqlite_inbox import DELIVER_ITEM, Delivery, delivery_rows, inbox_state, refusal
from storage.sqlite_ops import Db, fetchall, fetchone, json_list, one_of, together

# A run as `rows.run_record` reads it; a running run's usage is its ledger so far, a
# finished one's was totalled at finish. Usable in SELECT ... FROM runs and in RETURNING.
RUN_FIELDS = ", ".join(
    [
        "runs.id, runs.conversation_id",
        "(SELECT key FROM conversations WHERE conversations.id = runs.conversation_id)",
        "runs.outcome, runs.started_at, runs.finished_at, runs.user_id, runs.channel_key",
        "runs.model, runs.error, runs.surface_ref, runs.owner",
        *(
            f"CASE WHEN runs.outcome = 'running' THEN (SELECT COALESCE(SUM(l.{column}), 0) "
            f"FROM usage_ledger l WHERE l.run_id = runs.id) ELSE runs.{column} END"
            for column in (
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "cost_usd",
            )
        ),
    ]
)


@dataclass(frozen=True, slots=True)
class StartRunCall:
    conversation_id: int
    user_id: str | None
    channel_key: str | None
    model: str | None
    surface_json: str
    owner_json: str
    delivery: Delivery
    now: float
    request: int = 0  # this store's number for the call (`teammate_start` rows)


_INSERT_RUN_SELECT = (
    "SELECT id, 'running', ?, ?, COALESCE(?, channel_key), ?, ?, ? FROM conversations WHERE id = ?"
)
_RUN_COLUMNS_INSERTED = (
    "conversation_id, outcome, started_at, user_id, channel_key, model, surface_ref, owner"
)


def _started(call: StartRunCall, run_id: int, key: str, channel_key: str) -> RunRecord:
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


def _run_params(call: StartRunCall) -> tuple[Any, ...]:
    return (
        call.now,
        call.user_id,
        call.channel_key,
        call.model,
        call.surface_json,
        call.owner_json,
        call.conversation_id,
    )


async def _start_run_lone(db: Db, call: StartRunCall) -> RunRecord:
    row = await fetchone(
        db,
        f"INSERT INTO runs ({_RUN_COLUMNS_INSERTED}) {_INSERT_RUN_SELECT} RETURNING id, "
        "channel_key, (SELECT key FROM conversations WHERE conversations.id = conversation_id)",
        _run_params(call),
    )
    if row is None:
        raise KeyError(f"no conversation with id {call.conversation_id}")
    return _started(call, int(row[0]), str(row[2]), str(row[1]))


async def _start_run_many(db: Db, calls: list[StartRunCall]) -> list[RunRecord | Exception]:
    # Round trip 1: the lookups, and every run whose conversation and items are all known
    # (one INSERT; ids grow in insertion order, the calls' order). Round trip 2: deliveries.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    runs_json = json_list(
        [*_run_params(c), json_list(c.delivery.item_ids), len(set(c.delivery.item_ids))]
        for c in calls
    )
    found, before, inserted = await together(
        fetchall(
            db,
            "SELECT id, key, channel_key FROM conversations "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json_list({c.conversation_id for c in calls}),),
        ),
        inbox_state(db, wanted),
        fetchall(
            db,
            f"INSERT INTO runs ({_RUN_COLUMNS_INSERTED}) "
            "SELECT c.id, 'running', json_extract(j.value, '$[0]'), "
            "json_extract(j.value, '$[1]'), "
            "COALESCE(json_extract(j.value, '$[2]'), c.channel_key), "
            "json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'), "
            "json_extract(j.value, '$[5]') FROM json_each(?) j "
            "JOIN conversations c ON c.id = json_extract(j.value, '$[6]') "
            "WHERE (SELECT COUNT(*) FROM inbox WHERE id IN "
            "(SELECT value FROM json_each(json_extract(j.value, '$[7]'))) "
            "AND conversation_id = c.id) = json_extract(j.value, '$[8]') "
            "ORDER BY j.key RETURNING id",
            (runs_json,),
        ),
    )
    conversations = {int(row[0]): (str(row[1]), str(row[2])) for row in found}
    known = [c for c in calls if c.conversation_id in conversations]
    refused = {id(c): r for c in known if (r := refusal(c.delivery, before)) is not None}
    started = [c for c in known if id(c) not in refused]
    run_ids = {
        id(c): run_id
        for c, run_id in zip(started, sorted(int(row[0]) for row in inserted), strict=True)
    }
    delivering = [c for c in started if c.delivery.item_ids]
    if delivering:
        rows_ = [
            row for c in delivering for row in delivery_rows(c.delivery, run_ids[id(c)], c.now)
        ]
        await db.executemany(DELIVER_ITEM, rows_)
    outcomes: list[RunRecord | Exception] = []
    for c in calls:
        if c.conversation_id not in conversations:
            outcomes.append(KeyError(f"no conversation with id {c.conversation_id}"))
        elif id(c) in refused:
            outcomes.append(refused[id(c)])
        else:
            key, channel = conversations[c.conversation_id]
            channel = c.channel_key if c.channel_key is not None else channel
            outcomes.append(_started(c, run_ids[id(c)], key, channel))
    return outcomes


_START_ONE = (
    "INSERT INTO teammate_start VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING "
    "(SELECT s.run_id FROM teammate_started s WHERE s.request = teammate_start.request), "
    "(SELECT json_array(c.key, c.channel_key) FROM conversations c "
    "WHERE c.id = teammate_start.conversation_id)"
)


async def _start_run_delivering_one(db: Db, call: StartRunCall) -> RunRecord:
    """A run delivering one item: ONE statement (`START_SETUP`'s triggers do the rest)."""
    [item_id] = call.delivery.item_ids
    row = await fetchone(
        db,
        _START_ONE,
        (
            call.request,
            call.conversation_id,
            call.now,
            call.user_id,
            call.channel_key,
            call.model,
            call.surface_json,
            call.owner_json,
            item_id,
        ),
    )
    if row is None:  # skipped whole: the item is not that conversation's (or unknown)
        if await fetchone(db, "SELECT 1 FROM conversations WHERE id = ?", (call.conversation_id,)):
            raise KeyError(f"no inbox item {item_id} in conversation {call.conversation_id}")
        raise KeyError(f"no conversation with id {call.conversation_id}")
    key, channel_key = json.loads(row[1])
    channel = call.channel_key if call.channel_key is not None else channel_key
    return _started(call, int(row[0]), str(key), str(channel))


START_RUN: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run", one=one_of(_start_run_many), lone=_start_run_lone, many=_start_run_many
)
START_RUN_DELIVERING: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run+deliver", one=one_of(_start_run_many), many=_start_run_many
)
START_RUN_DELIVERING_ONE: Op[Db, StartRunCall, RunRecord] = Op(
    "start_run+deliver one",
    one=one_of(_start_run_many),
    lone=_start_run_delivering_one,
    many=_start_run_many,
)


async def _finish_lone(db: Db, call: tuple[int, str, str | None, float]) -> RunRecord:
    run_id, outcome, error, now = call
    row = await fetchone(
        db,
        "UPDATE runs SET outcome = ?, error = ?, finished_at = ?, "
        "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
        f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = runs.id) "
        f"WHERE id = ? AND outcome = 'running' RETURNING {RUN_FIELDS}",
        (outcome, error, now, run_id),
    )
    if row is None:  # finished before (the first finish wins), or unknown
        row = await fetchone(db, f"SELECT {RUN_FIELDS} FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise KeyError(f"no run with id {run_id}")
    return rows.run_record(row)


async def _finish_many(
    db: Db, calls: list[tuple[int, str, str | None, float]]
) -> list[RunRecord | Exception]:
    first: dict[int, tuple[int, str, str | None, float]] = {}
    for call in calls:  # a run finished twice in one batch: the first finish wins
        first.setdefault(call[0], call)
    # One round trip: every finish, then every run as it is now.
    _updated, found = await together(
        db.execute(
            "UPDATE runs SET outcome = json_extract(j.value, '$[1]'), "
            "error = json_extract(j.value, '$[2]'), finished_at = json_extract(j.value, '$[3]'), "
            "(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd) "
            f"= (SELECT {rows.USAGE_SUMS} FROM usage_ledger WHERE run_id = runs.id) "
            "FROM json_each(?) j WHERE runs.id = json_extract(j.value, '$[0]') "
            "AND runs.outcome = 'running'",
            (json_list(first.values()),),
        ),
        fetchall(
            db,
            f"SELECT {RUN_FIELDS} FROM runs WHERE id IN (SELECT value FROM json_each(?))",
            (json_list(first),),
        ),
    )
    finished = {int(row[0]): rows.run_record(row) for row in found}
    return [finished.get(call[0]) or KeyError(f"no run with id {call[0]}") for call in calls]


FINISH_RUN: Op[Db, tuple[int, str, str | None, float], RunRecord] = Op(
    "finish_run", one=_finish_lone, lone=_finish_lone, many=_finish_many
)


async def _surface_ref(db: Db, call: tuple[str, int]) -> RunRecord:
    row = await fetchone(
        db, f"UPDATE runs SET surface_ref = ? WHERE id = ? RETURNING {RUN_FIELDS}", call
    )
    if row is None:
        raise KeyError(f"no run with id {call[1]}")
    return rows.run_record(row)


SURFACE_REF: Op[Db, tuple[str, int], RunRecord] = Op(
    "set_run_surface_ref", one=_surface_ref, lone=_surface_ref
)


async def read_running_runs(db: Db) -> list[RunRecord]:
    """Runs still marked running, oldest first."""
    found = await fetchall(
        db, f"SELECT {RUN_FIELDS} FROM runs WHERE outcome = 'running' ORDER BY started_at, id"
    )
    return [rows.run_record(row) for row in found]
