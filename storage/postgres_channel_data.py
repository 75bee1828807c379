"""The PostgreSQL store's calls about a channel's own data: votes on its runs, its stored
configuration, its memory and its scheduled work.

Owns: `PostgresChannelData`, the part of `PostgresStore` (its base, after
`postgres_connections.PostgresConnections`) with those contract methods, each running its call
on a pooled connection through the module that owns its SQL (`postgres_usage` for feedback,
`postgres_channel_config`, `postgres_memory`, `postgres_schedules`).

Must not: hold SQL; import `tools` or `bots`; return rows.
"""

from __future__ import annotations

from typing import Any

from storage import postgres_channel_config as channel_config
from storage import postgres_memory as memory
from storage import postgres_schedules as scheduling
from storage import postgres_usage as usage_ledger
from storage import rows
from storage.postgres_connections import PostgresConnections
from storage.records import FeedbackTally, MemoryNote, Schedule, Vote


class PostgresChannelData(PostgresConnections):
    """A channel's votes, configuration, memory and schedules (`PostgresStore`'s base)."""

    # --- feedback and channel configuration -----------------------------------------------

    async def set_run_feedback(
        self, run_id: int, user_id: str, vote: Vote | None, *, channel_key: str | None = None
    ) -> FeedbackTally:
        """Record (or with None withdraw) `user_id`'s vote on the run; its tally after."""
        if vote not in ("up", "down", None):
            raise ValueError(f"a vote is 'up', 'down' or None, not {vote!r}")
        now = self._clock()
        return await self._call(
            lambda connection: usage_ledger.set_feedback(
                connection, run_id, user_id, vote, channel_key, now
            ),
            transaction=True,
        )

    async def get_channel_config(self, channel_key: str) -> dict[str, Any] | None:
        """The channel's stored configuration, or None if none was ever set."""
        return await self._call(lambda connection: channel_config.get(connection, channel_key))

    async def set_channel_config(
        self, channel_key: str, config: dict[str, Any], *, by: str | None
    ) -> None:
        """Replace the channel's stored configuration, recording who changed it and when."""
        config_json = rows.dump_json(config)  # raises TypeError before anything is written
        now = self._clock()
        await self._call(
            lambda connection: channel_config.replace(connection, channel_key, config_json, by, now)
        )

    # --- a channel's memory and scheduled work (`postgres_memory`, `postgres_schedules`) --

    async def memory_notes(self, channel_key: str) -> list[MemoryNote]:
        return await self._call(lambda connection: memory.notes(connection, channel_key))

    async def add_memory_note(
        self, channel_key: str, text: str, *, by: str | None, max_notes: int, max_chars: int
    ) -> MemoryNote:
        now = self._clock()
        return await self._call(
            lambda connection: memory.add_note(
                connection, channel_key, text, by, max_notes, max_chars, now
            ),
            transaction=True,
        )

    async def forget_memory_note(self, channel_key: str, note_id: int) -> bool:
        return await self._call(
            lambda connection: memory.forget_note(connection, channel_key, note_id)
        )

    async def clear_memory(self, channel_key: str) -> int:
        return await self._call(lambda connection: memory.clear(connection, channel_key))

    async def add_schedule(
        self,
        channel_key: str,
        *,
        prompt: str,
        cron: str | None,
        timezone: str,
        next_run_at: float,
        by_id: str,
        by_name: str,
        max_active: int,
    ) -> Schedule:
        call = (channel_key, prompt, cron, timezone, next_run_at, by_id, by_name, max_active)
        now = self._clock()
        return await self._call(
            lambda connection: scheduling.add_schedule(connection, *call, now), transaction=True
        )

    async def schedules(self, channel_key: str) -> list[Schedule]:
        return await self._call(lambda connection: scheduling.schedules(connection, channel_key))

    async def cancel_schedule(self, channel_key: str, schedule_id: int) -> bool:
        return await self._call(
            lambda connection: scheduling.cancel(connection, channel_key, schedule_id)
        )

    async def due_schedules(self, now: float, *, limit: int) -> list[Schedule]:
        return await self._call(lambda connection: scheduling.due(connection, now, limit))

    async def claim_schedule(
        self, schedule_id: int, *, due_at: float, next_run_at: float | None, now: float
    ) -> Schedule | None:
        return await self._call(
            lambda connection: scheduling.claim(connection, schedule_id, due_at, next_run_at, now)
        )

    async def unsettled_schedule_runs(self, claimed_before: float, *, limit: int) -> list[Schedule]:
        return await self._call(
            lambda connection: scheduling.unsettled(connection, claimed_before, limit)
        )

    async def reclaim_schedule_run(
        self, schedule_id: int, *, due_at: float, since: float, now: float
    ) -> Schedule | None:
        return await self._call(
            lambda connection: scheduling.reclaim(connection, schedule_id, due_at, since, now)
        )

    async def settle_schedule_run(self, schedule_id: int, *, due_at: float) -> bool:
        return await self._call(
            lambda connection: scheduling.settle(connection, schedule_id, due_at)
        )
