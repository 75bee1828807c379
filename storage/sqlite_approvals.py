"""Approval requests on SQLite.

Owns: `SqliteApprovals`, the part of `SqliteStore` (its base, after `SqliteConnections`) with
the approval methods of the contract, and their `Op`s (statements: `storage.approvals`). An
add is an insert that keeps the first request of a call, then its row read back, in the
writer's one transaction; a decision is one conditional `UPDATE … RETURNING`.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from typing import Any

from storage import approvals_sql as sql
from storage.approvals import ApprovalRecord, ApprovalState, approval_from, request_json
from storage.batching import Op
from storage.sqlite_connections import SqliteConnections
from storage.sqlite_ops import Db, fetchall, fetchone

# (conversation id, conversation key, channel, run, call, tool, request JSON, now, expires)
AddCall = tuple[int, str, str, int, str, str, str, float, float]
# (id, state, by, by name, now)
DecideCall = tuple[int, str, str | None, str | None, float]


async def _add(db: Db, call: AddCall) -> ApprovalRecord:
    await db.execute(sql.ADD.sqlite, call)
    row = await fetchone(db, sql.BY_CALL.sqlite, (call[3], call[4]))
    return approval_from(row)


async def _decide(db: Db, call: DecideCall) -> ApprovalRecord | None:
    row = await fetchone(db, sql.DECIDE.sqlite, call)
    return None if row is None else approval_from(row)


ADD: Op[Db, AddCall, ApprovalRecord] = Op("add_approval", one=_add)
DECIDE: Op[Db, DecideCall, ApprovalRecord | None] = Op("decide_approval", one=_decide)


class SqliteApprovals(SqliteConnections):
    """Approval requests (`SqliteStore`'s base)."""

    async def add_approval(
        self,
        *,
        conversation_id: int,
        conversation_key: str,
        channel_key: str,
        run_id: int,
        call_id: str,
        tool_name: str,
        request: dict[str, Any],
        now: float,
        expires_at: float,
    ) -> ApprovalRecord:
        call: AddCall = (
            conversation_id,
            conversation_key,
            channel_key,
            run_id,
            call_id,
            tool_name,
            request_json(request),
            now,
            expires_at,
        )
        return await self._write(ADD, call)

    async def approval(self, approval_id: int) -> ApprovalRecord | None:
        async def read(db: Db) -> ApprovalRecord | None:
            row = await fetchone(db, sql.BY_ID.sqlite, (approval_id,))
            return None if row is None else approval_from(row)

        return await self._read(read)

    async def run_approvals(self, run_id: int) -> list[ApprovalRecord]:
        async def read(db: Db) -> list[ApprovalRecord]:
            return [approval_from(r) for r in await fetchall(db, sql.OF_RUN.sqlite, (run_id,))]

        return await self._read(read)

    async def pending_approvals(self, *, limit: int) -> list[ApprovalRecord]:
        async def read(db: Db) -> list[ApprovalRecord]:
            return [approval_from(r) for r in await fetchall(db, sql.PENDING.sqlite, (limit,))]

        return await self._read(read)

    async def decide_approval(
        self,
        approval_id: int,
        state: ApprovalState,
        *,
        by: str | None,
        by_name: str | None,
        now: float,
    ) -> ApprovalRecord | None:
        if state == "pending":
            raise ValueError("a decision cannot make a request pending again")
        return await self._write(DECIDE, (approval_id, state, by, by_name, now))
