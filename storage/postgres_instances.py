"""Several instances on one PostgreSQL database: conversation leases and notifications.

Owns: this instance's identity, its leases (rows with an expiry judged by the database's
clock, renewed for all of them at once by one heartbeat statement), and the dedicated
connection that LISTENs for what other instances do (docs/architecture.md, "Several
instances"; why a lease row and not an advisory lock is explained there).

- A lease is a row `conversation_leases(conversation_id, holder, expires_at, epoch)`.
  Acquiring is one upsert that succeeds if nobody holds it, we do, or the holder let it
  expire; the heartbeat renews every lease we hold in ONE statement every `ttl / 3`, and a
  lease missing from its answer was lost (we stalled past the expiry): that is reported as
  `LeaseLost`.
- Fencing: an acquisition that does not find the lease held here draws a new epoch (one
  sequence), and `fence()` hands the runs the epoch got; their writes are refused unless the
  row still names this holder and epoch (the statements: `postgres_fencing`). `fresh()` is
  the same question asked of this instance's own clock, without the database: the time since
  the last acquisition or renewal that succeeded (measured from when it was sent, on a clock
  that keeps counting while the process or the machine is paused) is under the lease's life.
- Notifications travel on one channel per schema. `NOTIFY` is transactional, so the inbox's
  notice is sent inside `accept_delivery`'s transaction (`notify_sql`): delivered on commit,
  never for a rolled-back accept. An instance ignores its own. If the listening connection
  drops, it is re-made and `Resync` tells the runner it may have missed some. A connection can
  also die silently (half-open: a NAT or firewall forgot the flow; nothing arrives, no error):
  the server probes it with TCP keepalives, and this side asks it a question every
  `listen_check_s`; one unanswered within `listen_check_timeout_s` counts as a drop.

Must not: import `tools` or `bots`; know the store's other tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg

from storage.base import Fence, LeaseLost, NewInboxItem, Notification, Resync, StopRequest
from storage.postgres_pool import Pool

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000  # notifications waiting for the runner; past it: Resync instead
RECONNECT_DELAY_S = 1.0
LISTEN_CHECK_S = 10.0  # how often the listening connection is asked whether it is alive
LISTEN_CHECK_TIMEOUT_S = 5.0
HANDOVER_TIMEOUT_S = 5.0  # the leases' hand-over at close
# The server's TCP keepalives on the listening session (ignored over a Unix socket): a dead
# client is found by the server in about 30 + 3 × 10 s and its session ended.
KEEPALIVES = {
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}


def lease_clock() -> float:
    """Seconds on a clock that never goes back and keeps counting while the process is
    stopped or the machine suspended (Linux's boot time; elsewhere the monotonic clock): a
    lease's life by this instance's own reckoning."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def channel_for(schema: str) -> str:
    """Schemas share a database's NOTIFY namespace: one channel per schema (63 bytes max)."""
    return f"teammate_{schema}"[:63]


class Instances:
    """This instance's leases and notifications on one database (one per `PostgresStore`)."""

    def __init__(
        self,
        pool: Pool,
        url: str,
        schema: str,
        lease_ttl_s: float,
        clock: Callable[[], float] = lease_clock,
    ) -> None:
        self._pool = pool
        self._url = url
        self.channel = channel_for(schema)
        self.lease_ttl_s = lease_ttl_s
        self.instance_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._held: set[int] = set()
        self._taken_over: set[int] = set()  # held leases taken from an expired holder
        # When each held lease was (last) taken: a lease taken while a renewal is on its way
        # was not in that renewal, and is not lost for it.
        self._taken: dict[int, int] = {}
        self._takings = itertools.count()
        self._epochs: dict[int, int] = {}  # each held lease's epoch, for `fence()`
        self._renewed: dict[int, float] = {}  # when its last acquisition or renewal was sent
        self._clock = clock
        self._queue: asyncio.Queue[Notification | None] = asyncio.Queue()
        self._overflowed = False
        self._listener: asyncio.Task[None] | None = None
        self.listening: asyncpg.Connection | None = None  # the connection LISTENing now
        self._heartbeat: asyncio.Task[None] | None = None
        self._beat_connection: asyncpg.Connection | None = None
        self._closed = False
        self.listen_check_s = LISTEN_CHECK_S
        self.listen_check_timeout_s = LISTEN_CHECK_TIMEOUT_S

    # --- leases ---------------------------------------------------------------------------

    async def acquire(self, conversation_id: int) -> bool:
        sent = self._clock()
        keep = conversation_id in self._held  # renewing ours keeps the epoch its runs carry
        found = await self._pool.fetch(
            "INSERT INTO conversation_leases (conversation_id, holder, expires_at) "
            "VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3)) "
            "ON CONFLICT (conversation_id) DO UPDATE SET holder = EXCLUDED.holder, "
            "expires_at = EXCLUDED.expires_at, acquired_at = CASE WHEN "
            "conversation_leases.holder = EXCLUDED.holder THEN conversation_leases.acquired_at "
            "ELSE clock_timestamp() END, epoch = CASE WHEN $4 AND "
            "conversation_leases.holder = EXCLUDED.holder THEN conversation_leases.epoch "
            "ELSE nextval('lease_epochs') END "
            "WHERE conversation_leases.holder = EXCLUDED.holder "
            "OR conversation_leases.expires_at < clock_timestamp() "
            # xmax is 0 for a row just inserted, not for one updated: a row there already
            # and not ours was another holder's, expired (a released lease has no row), or
            # ours let lapse (its runs were stopped without being closed).
            "RETURNING xmax <> 0, epoch",
            conversation_id,
            self.instance_id,
            self.lease_ttl_s,
            keep,
        )
        row = found[0] if found else None
        if row is not None:
            if row[0] and conversation_id not in self._held:
                self._taken_over.add(conversation_id)
            else:
                self._taken_over.discard(conversation_id)
            self._held.add(conversation_id)
            self._taken[conversation_id] = next(self._takings)
            self._epochs[conversation_id] = int(row[1])
            self._renewed[conversation_id] = sent
            self._start_heartbeat()
        return row is not None

    def fence(self, conversation_id: int) -> Fence | None:
        epoch = self._epochs.get(conversation_id)
        if epoch is None or conversation_id not in self._held:
            return None
        return Fence(conversation_id, self.instance_id, epoch)

    def fresh(self, fence: Fence) -> bool:
        cid = fence.conversation_id
        if cid not in self._held or self._epochs.get(cid) != fence.epoch:
            return False  # lost, let lapse, or taken again since under another epoch
        return self._clock() - self._renewed.get(cid, float("-inf")) < self.lease_ttl_s

    def let_lapse(self, conversation_id: int) -> None:
        self._forget(conversation_id)

    def _forget(self, conversation_id: int) -> None:
        self._held.discard(conversation_id)
        self._taken_over.discard(conversation_id)
        self._taken.pop(conversation_id, None)
        self._epochs.pop(conversation_id, None)
        self._renewed.pop(conversation_id, None)

    def took_over(self, conversation_id: int) -> bool:
        """True if the lease this instance holds was taken from another holder whose lease had
        expired (that holder died or stalled: its runs there may still be open)."""
        return conversation_id in self._taken_over and conversation_id in self._held

    async def release(self, conversation_id: int) -> None:
        self._forget(conversation_id)
        await self._pool.execute(
            "DELETE FROM conversation_leases WHERE conversation_id = $1 AND holder = $2",
            conversation_id,
            self.instance_id,
        )

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and not self._closed:
            self._heartbeat = asyncio.create_task(self._beat(), name="lease-heartbeat")

    async def _beat(self) -> None:
        try:
            while not self._closed:
                await asyncio.sleep(self.lease_ttl_s / 3)
                if not self._held:
                    continue
                asked = {cid: self._taken.get(cid) for cid in self._held}
                sent = self._clock()
                try:
                    kept = await self._renew()
                except (
                    OSError,
                    TimeoutError,
                    asyncpg.PostgresError,
                    asyncpg.InterfaceError,
                ) as exc:
                    log.warning("could not renew conversation leases: %s", exc)
                    self._drop_heartbeat_connection()
                    continue
                for conversation_id in kept & self._held:  # held: `_renewed` has it
                    renewed = self._renewed[conversation_id]  # later if taken meanwhile
                    self._renewed[conversation_id] = max(renewed, sent)
                for conversation_id in sorted(self._held - kept):
                    if self._taken[conversation_id] != asked.get(conversation_id):
                        continue  # taken (again) while the renewal was on its way
                    log.warning("lost the lease of conversation %s", conversation_id)
                    self._forget(conversation_id)
                    self._put(LeaseLost(conversation_id))
        finally:
            self._drop_heartbeat_connection()

    async def _renew(self) -> set[int]:
        """Renew the leases this instance holds (one statement); the conversations renewed.
        Only those: one let lapse keeps its row, and must expire.

        On a connection of its own, not the pool's: behind a busy pool (every running
        conversation queues its statements there) a renewal can wait longer than a lease
        lives, and another instance would take over conversations this live one runs."""
        if self._beat_connection is None or self._beat_connection.is_closed():
            self._beat_connection = await asyncpg.connect(self._url, timeout=self.lease_ttl_s)
        # Rows locked in conversation order, as fenced writes lock them: never a deadlock.
        rows = await self._beat_connection.fetch(
            "UPDATE conversation_leases "
            "SET expires_at = clock_timestamp() + make_interval(secs => $2) "
            "WHERE conversation_id IN (SELECT conversation_id FROM conversation_leases "
            "WHERE holder = $1 AND conversation_id = ANY($3::bigint[]) "
            "ORDER BY conversation_id FOR UPDATE) AND holder = $1 "
            "RETURNING conversation_id",
            self.instance_id,
            self.lease_ttl_s,
            sorted(self._held),
            timeout=self.lease_ttl_s,
        )
        return {int(row[0]) for row in rows}

    def _drop_heartbeat_connection(self) -> None:
        if self._beat_connection is not None:
            self._beat_connection.terminate()
            self._beat_connection = None

    # --- notifications --------------------------------------------------------------------

    def inbox_notify_sql(
        self, channel: str, conversation: str, key: str, item: str, sender: str
    ) -> str:
        """`pg_notify(...)` of a `NewInboxItem` notice, for the accepting statement; the
        arguments are SQL expressions (parameters such as "$6", or columns)."""
        return (
            f"pg_notify({channel}, json_build_object('kind', 'inbox', 'conversation_id', "
            f"{conversation}, 'key', {key}::text, 'item_id', {item}, 'from', {sender}::text)"
            "::text)"
        )

    async def publish_stop(
        self, conversation_key: str, run_id: int | None, by_id: str | None, by_name: str | None
    ) -> None:
        payload = {
            "kind": "stop",
            "key": conversation_key,
            "run_id": run_id,
            "by_id": by_id,
            "by_name": by_name,
            "from": self.instance_id,
        }
        await self._pool.execute(
            "SELECT pg_notify($1, $2)", self.channel, json.dumps(payload)[:7900]
        )

    async def start(self) -> None:
        """Start listening (from when the store opens, so nothing sent later is missed)."""
        if self._listener is None and not self._closed:
            ready = asyncio.get_running_loop().create_future()
            self._listener = asyncio.create_task(self._listen(ready), name="notifications")
            await asyncio.shield(ready)

    async def notifications(self) -> AsyncIterator[Notification]:
        while True:
            notice = await self._queue.get()
            if notice is None:
                return
            yield notice

    def _put(self, notice: Notification) -> None:
        if self._queue.qsize() >= QUEUE_LIMIT:
            if not self._overflowed:
                log.warning("too many notifications waiting; the runner will resync instead")
            self._overflowed = True
            return
        if self._overflowed:
            self._overflowed = False
            self._queue.put_nowait(Resync())
        self._queue.put_nowait(notice)

    def _received(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            data = json.loads(payload)
            if data.get("from") == self.instance_id:
                return
            if data["kind"] == "inbox":
                self._put(
                    NewInboxItem(
                        int(data["conversation_id"]), str(data["key"]), int(data["item_id"])
                    )
                )
            elif data["kind"] == "stop":
                run_id = data.get("run_id")
                self._put(
                    StopRequest(
                        str(data["key"]),
                        None if run_id is None else int(run_id),
                        data.get("by_id"),
                        data.get("by_name"),
                    )
                )
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed notification on %s", self.channel)

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        """Keep one connection LISTENing (not a pooled one: LISTEN is session state)."""
        first = True
        while not self._closed:
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    self._url, timeout=self.listen_check_timeout_s, server_settings=KEEPALIVES
                )
            except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
                log.warning("cannot listen for other instances: %s", exc)
                if not ready.done():
                    ready.set_result(None)
                await asyncio.sleep(RECONNECT_DELAY_S)
                continue
            self.listening = connection
            try:
                connection.add_termination_listener(lambda _c, lost=lost: lost.set())
                await connection.add_listener(self.channel, self._received)
                if not ready.done():
                    ready.set_result(None)
                if not first:
                    self._put(Resync())
                first = False
                if await self._until_lost(connection, lost):
                    log.warning(
                        "the connection listening for other instances dropped; re-making it"
                    )
                else:
                    log.warning(
                        "the connection listening for other instances stopped answering; "
                        "re-making it"
                    )
                    connection.terminate()  # a silent connection would not answer a close
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("listening for other instances failed: %s", exc)
            finally:
                self.listening = None
                with contextlib.suppress(Exception):
                    await connection.close(timeout=2)
            await asyncio.sleep(RECONNECT_DELAY_S)

    async def _until_lost(self, connection: asyncpg.Connection, lost: asyncio.Event) -> bool:
        """Wait while the listening connection lives: True when it dropped, False when it
        stopped answering (half-open)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), self.listen_check_s)
                return True
            try:
                await connection.fetchval("SELECT 1", timeout=self.listen_check_timeout_s)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                return lost.is_set()

    async def close(self) -> None:
        self._closed = True
        for task in (self._heartbeat, self._listener):
            if task is not None:
                task.cancel()
                # Not `await task`: that would take this caller's own cancellation (a grace
                # period running out) for the task's, swallow it and return late.
                await asyncio.wait([task])
                if not task.cancelled():
                    task.exception()  # retrieved: it ended on its way out, nothing to add
        if self._held:  # a clean shutdown hands its conversations over at once
            # Bounded, else they expire: a shutdown must end within its grace.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(HANDOVER_TIMEOUT_S):
                    await self._pool.execute(
                        "DELETE FROM conversation_leases WHERE holder = $1", self.instance_id
                    )
        self._queue.put_nowait(None)
