"""Fencing on PostgreSQL: a run's writes land only while its lease is still its own.

Owns: the condition every fenced statement carries (`held`: the lease row still names the
holder and epoch the run's `Fence` got, locked `FOR SHARE` so a takeover either waits for the
write to commit or the write waits and then sees the new holder), the parameters a `Fence`
becomes, and the look-up that tells a write refused for its lease from one refused for an
unknown id (only after a statement wrote nothing). docs/architecture.md, "Several instances".

Must not: acquire connections or open transactions; know the store's other tables.
"""

from __future__ import annotations

import asyncpg

from storage.records import Fence, FencedOut


def held(conversation: str, holder: str, epoch: str) -> str:
    """SQL: true if no fence is given (`holder` NULL), else iff the lease row matches it.

    The row lock orders the write against a takeover: an acquiring `UPDATE` of the row waits
    for this statement's commit, and this statement, waiting for one, re-reads the row and
    finds another holder. Lease rows are the first rows a fenced statement locks, and a
    writer of lease rows locks nothing else, so this adds no deadlock."""
    return (
        f"({holder}::text IS NULL OR EXISTS (SELECT 1 FROM conversation_leases fl "
        f"WHERE fl.conversation_id = {conversation} AND fl.holder = {holder}::text "
        f"AND fl.epoch = {epoch}::bigint FOR SHARE))"
    )


def args(fence: Fence | None) -> tuple[str | None, int | None]:
    """A fence as a statement's two parameters (holder, epoch); NULLs without one."""
    return (None, None) if fence is None else (fence.holder, fence.epoch)


async def refuse_if_lost(connection: asyncpg.Connection, fence: Fence | None, what: str) -> None:
    """After a statement wrote nothing: `FencedOut` if its fence no longer holds (a lost lease
    never comes back under the same epoch, so the answer stands), else return."""
    if fence is None:
        return
    holds = await connection.fetchval(
        "SELECT EXISTS (SELECT 1 FROM conversation_leases WHERE conversation_id = $1 "
        "AND holder = $2 AND epoch = $3)",
        fence.conversation_id,
        fence.holder,
        fence.epoch,
    )
    if not holds:
        raise FencedOut(fence.conversation_id, what)
