"""The audit log's storage: who did what to what, when and from where, append-only.

Owns: the statements behind `append_audit` and `audit_entries` on both backends, the record
they build (`AuditEntry`), and the two store parts that carry those methods
(`SqliteAuditLog`, `PostgresAuditLog`, bases of the stores). The tables themselves refuse
UPDATE and DELETE (triggers in the migrations), so an entry, once written, stays as written.
What an entry may hold (secrets masked, sizes bounded) is `bots.features.audit`'s rule; this
module stores what it is given.

Must not: import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage import rows
from storage.batching import Op
from storage.postgres_connections import PostgresConnections
from storage.records import AuditEntry
from storage.sqlite_connections import SqliteConnections
from storage.sqlite_ops import Db, fetchall, fetchone

_COLUMNS = "id, at, actor, action, target, origin, detail"
# Newest first, each filter applying only when given. $1 limit, $2 before id, $3 actor,
# $4 action, $5 target.
_ENTRIES_SQLITE = (
    f"SELECT {_COLUMNS} FROM audit_log "
    "WHERE (?2 IS NULL OR id < ?2) AND (?3 IS NULL OR actor = ?3) "
    "AND (?4 IS NULL OR action = ?4) AND (?5 IS NULL OR target = ?5) "
    "ORDER BY id DESC LIMIT ?1"
)
_ENTRIES_POSTGRES = (
    "SELECT id, at, actor, action, target, origin, detail::text FROM audit_log "
    "WHERE ($2::bigint IS NULL OR id < $2) AND ($3::text IS NULL OR actor = $3) "
    "AND ($4::text IS NULL OR action = $4) AND ($5::text IS NULL OR target = $5) "
    "ORDER BY id DESC LIMIT $1"
)
# The database's clock stamps the entry: instances whose clocks disagree still write one order.
_APPEND_POSTGRES = (
    "INSERT INTO audit_log (at, actor, action, target, origin, detail) "
    "VALUES (extract(epoch FROM clock_timestamp()), $1, $2, $3, $4, $5::jsonb) RETURNING id"
)
_MAX_PAGE = 1000


def entry_from(row: Any) -> AuditEntry:
    """A row of `_COLUMNS` (the detail as JSON text)."""
    return AuditEntry(
        id=int(row[0]),
        at=float(row[1]),
        actor=str(row[2]),
        action=str(row[3]),
        target=str(row[4]),
        origin=str(row[5]),
        detail=rows.load_json_object(str(row[6])),
    )


def _page(limit: int) -> int:
    if limit < 1:
        raise ValueError(f"an audit page holds at least one entry, not {limit}")
    return min(limit, _MAX_PAGE)


# (actor, action, target, origin, detail JSON, now)
AppendCall = tuple[str, str, str, str, str, float]


async def _append(db: Db, call: AppendCall) -> int:
    actor, action, target, origin, detail, now = call
    row = await fetchone(
        db,
        "INSERT INTO audit_log (at, actor, action, target, origin, detail) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (now, actor, action, target, origin, detail),
    )
    return int(row[0])


APPEND: Op[Db, AppendCall, int] = Op("append_audit", one=_append, lone=_append)


class SqliteAuditLog(SqliteConnections):
    """`append_audit` and `audit_entries` on SQLite (a base of `SqliteStore`)."""

    async def append_audit(
        self, *, actor: str, action: str, target: str, origin: str, detail: Mapping[str, Any]
    ) -> int:
        call = (actor, action, target, origin, rows.dump_json(dict(detail)), self._clock())
        return await self._write(APPEND, call)

    async def audit_entries(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
    ) -> list[AuditEntry]:
        params = (_page(limit), before_id, actor, action, target)

        async def read(db: Db) -> list[AuditEntry]:
            return [entry_from(row) for row in await fetchall(db, _ENTRIES_SQLITE, params)]

        return await self._read(read)


class PostgresAuditLog(PostgresConnections):
    """`append_audit` and `audit_entries` on PostgreSQL (a base of `PostgresStore`)."""

    async def append_audit(
        self, *, actor: str, action: str, target: str, origin: str, detail: Mapping[str, Any]
    ) -> int:
        detail_json = rows.dump_json(dict(detail))
        found = await self._call(
            lambda connection: connection.fetchval(
                _APPEND_POSTGRES, actor, action, target, origin, detail_json
            )
        )
        return int(found)

    async def audit_entries(
        self,
        *,
        limit: int,
        before_id: int | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
    ) -> list[AuditEntry]:
        page = _page(limit)
        found = await self._call(
            lambda connection: connection.fetch(
                _ENTRIES_POSTGRES, page, before_id, actor, action, target
            )
        )
        return [entry_from(row) for row in found]
