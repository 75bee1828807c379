"""Running scheduled work when it is due (docs/architecture.md, "Scheduled work").

Owns: finding due schedules, claiming each run (one conditional update in the store, so of
several instances on one database exactly one runs it), starting a new thread in the
schedule's channel through the platform's `ThreadStarter` ("scheduled by <@U…>"), and handing
the prompt to the runner as an ordinary message from the person who set it up: access rules,
budgets and the channel's configuration apply as to any other run.

Catch-up: a due schedule's next run is counted from now, not from when it was due, so a
schedule that fell due many times while no process was running runs once after start-up.

A claimed run stays pending in the store until it is handed to the runner (then the runner's
own inbox and recovery carry it). A pending run older than RETRY_AFTER_S — its process died
between the claim and the hand-over, or the platform refused to post its thread — is claimed
again by one instance and tried again, at most MAX_START_ATTEMPTS times, then given up with an
error in the log. So a due run is neither skipped by a crash nor started twice.

Claims are stamped and compared on the database's clock (`store.now()`), never on an
instance's own: two instances whose clocks disagree agree on a claim's age. Posting a thread
gives up after START_TIMEOUT_S (a platform backing off from 429s), and RETRY_AFTER_S is longer
than that by a margin, so a claim still being posted is never taken again. Left: a crash, or a
post given up after the platform carried it out, leaves that first thread empty (the retry
posts another).

Must not: know a platform's payloads (each adapter's `ThreadStarter` does), or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from bots.features.schedules import describe_time, next_after
from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.surface.contract import Surface
from core.messages import Author
from storage.base import Schedule

log = logging.getLogger(__name__)

MAX_DUE_PER_TICK = 50
HEADER_PROMPT_CHARS = 300
# Posting a scheduled run's thread gives up after this (a platform's 429 back-offs included)…
START_TIMEOUT_S = 240.0
# …so a claim this old (on the database's clock) is not still being posted.
RETRY_AFTER_S = START_TIMEOUT_S + 60.0
MAX_START_ATTEMPTS = 5


@dataclass(slots=True, frozen=True)
class StartedThread:
    """A new message posted in a channel, and the conversation of its thread."""

    conversation_key: str
    surface: Surface
    title: str | None = None


class ThreadStarter(Protocol):
    """A platform's hook: post `text` as a new message in the channel and open its thread.
    `for_user` is the person the work is attributed to (the text mentions them)."""

    async def start_thread(
        self, channel_key: str, text: str, *, for_user: str
    ) -> StartedThread: ...


def header_text(schedule: Schedule) -> str:
    """What the new message that opens a scheduled run's thread says after the attribution,
    as plain text (each platform escapes it and adds the mention: `SCHEDULED_BY`)."""
    prompt = " ".join(schedule.prompt.split())
    if len(prompt) > HEADER_PROMPT_CHARS:
        prompt = prompt[: HEADER_PROMPT_CHARS - 1] + "…"
    return f"(#{schedule.id}) {prompt}"


# The head of a scheduled run's thread: `mention` in the platform's syntax (Slack and Discord
# both write `<@id>`), `text` escaped for the platform.
SCHEDULED_BY = "⏰ Scheduled by {mention} {text}"


def run_text(schedule: Schedule, due_at: float) -> str:
    """What the model reads: the schedule's prompt, framed as a scheduled task."""
    when = f"recurring, cron `{schedule.cron}`" if schedule.cron else "one-off"
    return (
        f"(Scheduled task #{schedule.id}, {when}, set up by {schedule.created_by_name}; due "
        f"{describe_time(due_at, schedule.timezone)}. Do it now and answer here.)\n"
        f"{schedule.prompt}"
    )


class Scheduler:
    """Looks for due schedules every `[schedules] poll_s` seconds (and once at start)."""

    def __init__(
        self,
        runner: ConversationRunner,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        shared_clock: Callable[[], Awaitable[float]] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        """`clock` says when schedules fall due (this process's time is fine for that);
        `shared_clock` (default: the store's, the database's) stamps and ages claims, which
        other instances compare."""
        if retry_after_s <= start_timeout_s:
            raise ValueError("a claim must outlive the longest start it may still be in")
        self.runner = runner
        self.settings = settings
        self._clock = clock
        self._shared_clock = shared_clock or runner.store.now
        self._start_timeout_s = start_timeout_s
        self._retry_after_s = retry_after_s
        self._starters: dict[str, ThreadStarter] = {}
        self._task: asyncio.Task[None] | None = None

    def add_platform(self, platform: str, starter: ThreadStarter) -> None:
        """Run the schedules of `platform`'s channels (`slack`, `discord`) here."""
        self._starters[platform] = starter

    async def tick(self) -> list[int]:
        """Start every schedule due now that this process can post, and retry runs whose start
        failed or whose process died: the ids started."""
        now = self._clock()
        store = self.runner.store
        stamp = await self._shared_clock()
        started: list[int] = []
        for pending in await store.unsettled_schedule_runs(
            stamp - self._retry_after_s, limit=MAX_DUE_PER_TICK
        ):
            starter = self._starter_for(pending)
            if starter is None or pending.pending_due_at is None or pending.pending_since is None:
                continue  # another instance serves that platform
            due_at = pending.pending_due_at
            if pending.pending_attempts >= MAX_START_ATTEMPTS:
                if await store.settle_schedule_run(pending.id, due_at=due_at):
                    log.error(
                        "scheduled run of #%s in %s, due %s: gave up after %d attempts to start it",
                        pending.id,
                        pending.channel_key,
                        describe_time(due_at, pending.timezone),
                        pending.pending_attempts,
                    )
                continue
            again = await store.reclaim_schedule_run(
                pending.id, due_at=due_at, since=pending.pending_since, now=stamp
            )
            if again is not None and await self._run(again, starter, due_at, now):
                started.append(again.id)
        for schedule in await store.due_schedules(now, limit=MAX_DUE_PER_TICK):
            starter = self._starter_for(schedule)
            if starter is None or schedule.next_run_at is None:
                continue  # another instance serves that platform
            due_at = schedule.next_run_at
            claimed = await store.claim_schedule(
                schedule.id, due_at=due_at, next_run_at=next_after(schedule, now), now=stamp
            )
            if claimed is None:
                continue  # another instance took this run
            if await self._run(schedule, starter, due_at, now):
                started.append(schedule.id)
        return started

    def _starter_for(self, schedule: Schedule) -> ThreadStarter | None:
        return self._starters.get(schedule.channel_key.split(":", 1)[0])

    async def _run(
        self, schedule: Schedule, starter: ThreadStarter, due_at: float, now: float
    ) -> bool:
        """Start the claimed run; settled once the runner has it, else left pending (retried
        after the retry window). True when started."""
        try:
            await self._start(schedule, starter, due_at, now)
        except Exception:
            log.exception(
                "scheduled run of #%s in %s failed to start; tried again in %g s",
                schedule.id,
                schedule.channel_key,
                self._retry_after_s,
            )
            return False
        await self.runner.store.settle_schedule_run(schedule.id, due_at=due_at)
        return True

    async def _start(
        self, schedule: Schedule, starter: ThreadStarter, due_at: float, now: float
    ) -> None:
        async with asyncio.timeout(self._start_timeout_s):  # the claim outlives it
            thread = await starter.start_thread(
                schedule.channel_key, header_text(schedule), for_user=schedule.created_by
            )
        incoming = Incoming(
            conversation_key=thread.conversation_key,
            channel_key=schedule.channel_key,
            author=Author(id=schedule.created_by, name=schedule.created_by_name),
            text=run_text(schedule, due_at),
            delivery_id=f"schedule:{schedule.id}:{due_at!r}",
            timestamp=now,
            title=thread.title,
        )
        result = await self.runner.submit(incoming, thread.surface)
        log.info("scheduled run of #%s in %s: %s", schedule.id, schedule.channel_key, result)

    def start(self) -> None:
        """Poll in the background until `close()`; a no-op without platforms."""
        if self._task is None and self._starters and self.settings.schedules.enabled:
            self._task = asyncio.create_task(self._poll(), name="scheduler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _poll(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the database may be briefly away: try again next time
                log.exception("looking for scheduled work failed")
            await asyncio.sleep(self.settings.schedules.poll_s)
