"""Group commit for PostgreSQL appends: concurrent appends, to any conversations, in ONE
statement (the batching idea that made the SQLite store fast, docs/architecture.md "Storage").

Owns: `AppendBatcher`. A lone append (nothing in flight) goes at once, alone; while batches are
in flight (at most `max_in_flight`, each on its own pooled connection), new appends queue and
the next flush takes all of them (up to `max_batch`): one `UPDATE ... RETURNING` of the
conversations' `last_seq` (rows locked in id order first, so two batches never deadlock on each
other), one `INSERT` of the messages, one of the ledger entries, as one statement. A batch
commits whole or not at all, whatever its callers do (a cancelled caller's append may still
happen, as on SQLite). If a batch fails (an unknown run, a deadlock with another instance), each
of its appends is retried alone, so only the faulty one fails.

Must not: import `tools` or `bots`; know any table but conversations, messages, runs and the
usage ledger.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import asyncpg

from core.messages import Message, Usage
from storage import postgres_rows as rows
from storage.postgres_pool import Pool

log = logging.getLogger(__name__)

MULTI_APPEND = """
    WITH input AS (
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::text[], $8::float8[], $9::text[], $10::bool[],
                             $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[],
                             $15::float8[])
            WITH ORDINALITY AS u (conv, run_id, role, author_id, author_name, platform_id,
                                  body, at, model, charge, i, o, cr, cw, cost, n)
    ), counts AS (
        SELECT conv, count(*) AS k, max(at) AS at FROM input GROUP BY conv
    ), locked AS (
        SELECT id FROM conversations WHERE id IN (SELECT conv FROM counts)
        ORDER BY id FOR UPDATE
    ), c AS (
        UPDATE conversations SET last_seq = last_seq + counts.k, updated_at = counts.at
        FROM counts
        WHERE conversations.id = counts.conv AND conversations.id IN (SELECT id FROM locked)
        RETURNING conversations.id, conversations.last_seq - counts.k AS base
    ), numbered AS (
        SELECT x.*, c.base + row_number() OVER (PARTITION BY x.conv ORDER BY x.n) AS seq
        FROM input x JOIN c ON c.id = x.conv
    ), m AS (
        INSERT INTO messages (conversation_id, seq, role, author_id, author_name,
                              platform_message_id, run_id, created_at, body)
        SELECT conv, seq, role, author_id, author_name, platform_id, run_id, at, body
        FROM numbered
    ), l AS (
        INSERT INTO usage_ledger (run_id, conversation_id, user_id, channel_key, model, at,
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd)
        SELECT r.id, r.conversation_id, r.user_id, r.channel_key, COALESCE(x.model, r.model),
               x.at, x.i, x.o, x.cr, x.cw, x.cost
        FROM numbered x JOIN runs r ON r.id = x.run_id
        WHERE x.charge
    )
    SELECT n, seq FROM numbered
"""


@dataclass(slots=True)
class _Append:
    conversation_id: int
    message: Message
    body_json: str
    run_id: int | None
    now: float
    usage: Usage | None
    model: str | None
    done: asyncio.Future[int]


class AppendBatcher:
    """Appends to one database, grouped while the database is busy."""

    def __init__(self, pool: Pool, *, max_in_flight: int, max_batch: int = 500) -> None:
        self._pool = pool
        self._max_in_flight = max_in_flight
        self._max_batch = max_batch
        self._queued: list[_Append] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def append(
        self,
        conversation_id: int,
        message: Message,
        body_json: str,
        run_id: int | None,
        now: float,
        usage: Usage | None,
        model: str | None,
    ) -> asyncio.Future[int]:
        """The seq the message gets, once its batch committed (KeyError: unknown
        conversation or run)."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queued.append(
            _Append(conversation_id, message, body_json, run_id, now, usage, model, done)
        )
        self._flush_if_free()
        return done

    async def wait(self) -> None:
        """Until every queued append has been written (for `close`)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    def _flush_if_free(self) -> None:
        while self._queued and self._in_flight < self._max_in_flight:
            batch = self._queued[: self._max_batch]
            del self._queued[: self._max_batch]
            self._in_flight += 1
            task = asyncio.ensure_future(self._flush(batch))
            self._tasks.add(task)
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._in_flight -= 1
        self._flush_if_free()

    async def _flush(self, batch: list[_Append]) -> None:
        try:
            if len(batch) == 1:
                await self._alone(batch[0])
                return
            try:
                seqs = await self._together(batch)
            except (asyncpg.ForeignKeyViolationError, asyncpg.DeadlockDetectedError):
                for one in batch:  # find the faulty one(s): each alone
                    await self._alone(one)
                return
            for n, one in enumerate(batch, start=1):
                seq = seqs.get(n)
                if seq is None:
                    _fail(one, KeyError(f"no conversation with id {one.conversation_id}"))
                elif not one.done.done():
                    one.done.set_result(seq)
        except BaseException as exc:  # e.g. the connection broke: every caller hears it
            for one in batch:
                _fail(one, exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise

    async def _alone(self, one: _Append) -> None:
        try:
            async with self._pool.acquire() as connection:
                seq = await rows.append_many(
                    connection,
                    one.conversation_id,
                    [(one.message, one.body_json)],
                    one.run_id,
                    one.now,
                    one.usage,
                    one.model,
                )
        except Exception as exc:
            _fail(one, exc)
        else:
            if not one.done.done():
                one.done.set_result(seq)

    async def _together(self, batch: list[_Append]) -> dict[int, int]:
        columns = rows.columns_of([(one.message, one.body_json) for one in batch])
        no_usage = Usage()
        usages = [one.usage or no_usage for one in batch]
        async with self._pool.acquire() as connection:
            found = await connection.fetch(
                MULTI_APPEND,
                [one.conversation_id for one in batch],
                [one.run_id for one in batch],
                *columns,
                [one.now for one in batch],
                [one.model for one in batch],
                [one.usage is not None for one in batch],
                [u.input for u in usages],
                [u.output for u in usages],
                [u.cache_read for u in usages],
                [u.cache_write for u in usages],
                [u.cost for u in usages],
            )
        return {int(row[0]): int(row[1]) for row in found}


def _fail(one: _Append, exc: BaseException) -> None:
    if not one.done.done():
        one.done.set_exception(exc)
    if not one.done.cancelled():
        one.done.exception()  # retrieved here: a caller that was cancelled never reads it
