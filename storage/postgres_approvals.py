"""Approval requests on PostgreSQL.

Owns: `PostgresApprovals`, the part of `PostgresStore` (its base, after
`PostgresChannelData`) with the approval methods of the contract, each one statement (or an
insert and its row read back in one transaction) on a pooled connection (statements:
`storage.approvals`). A decision is one conditional `UPDATE … RETURNING`: of two instances
deciding one request, the second waits for the first's row lock, then finds it decided.

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from storage import approvals_sql as sql
from storage.approvals import ApprovalRecord, ApprovalState, approval_from, request_json
from storage.postgres_channel_data import PostgresChannelData


class PostgresApprovals(PostgresChannelData):
    """Approval requests (`PostgresStore`'s base)."""

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
        text = request_json(request)

        async def add(connection: asyncpg.Connection) -> ApprovalRecord:
            await connection.execute(
                sql.ADD.postgres,
                conversation_id,
                conversation_key,
                channel_key,
                run_id,
                call_id,
                tool_name,
                text,
                now,
                expires_at,
            )
            return approval_from(await connection.fetchrow(sql.BY_CALL.postgres, run_id, call_id))

        return await self._call(add, transaction=True)

    async def approval(self, approval_id: int) -> ApprovalRecord | None:
        row = await self._call(lambda c: c.fetchrow(sql.BY_ID.postgres, approval_id))
        return None if row is None else approval_from(row)

    async def run_approvals(self, run_id: int) -> list[ApprovalRecord]:
        found = await self._call(lambda c: c.fetch(sql.OF_RUN.postgres, run_id))
        return [approval_from(row) for row in found]

    async def pending_approvals(self, *, limit: int) -> list[ApprovalRecord]:
        found = await self._call(lambda c: c.fetch(sql.PENDING.postgres, limit))
        return [approval_from(row) for row in found]

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
        row = await self._call(
            lambda c: c.fetchrow(sql.DECIDE.postgres, approval_id, state, by, by_name, now)
        )
        return None if row is None else approval_from(row)
