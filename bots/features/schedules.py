"""Scheduled work: what a schedule is (a 5-field cron expression or one time, in the channel's
time zone), checking one, creating, listing and cancelling them, and the `schedule` tool
(docs/architecture.md, "Scheduled work").

Owns: parsing and checking times (cron through `cronsim`, one-off times with `zoneinfo`), the
next run of a schedule, the bounds (active schedules per channel, the shortest interval), the
texts people and the model see, and `ScheduleTool`. Running what is due is
`bots.features.scheduler`.

Time zones: a cron expression matches wall-clock time in the channel's zone, so "0 9 * * 1"
is 9:00 every Monday in summer and winter. On a DST change a time that does not exist that day
(02:30 when clocks go forward) runs at the first minute after the gap, and a time that happens
twice (02:30 when clocks go back) runs once, at its first occurrence (cron's convention).
A one-off time in the gap is moved forward by the gap; an ambiguous one is its first occurrence.

Must not: know a platform, or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, Field

from bots.features.channel_config import channel_timezone
from bots.settings import ChannelConfig, ScheduleSettings, Settings
from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from storage.base import ConversationStore, Schedule, TooManySchedules

log = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 2000
MAX_AHEAD_DAYS = 366  # a one-off at most this far ahead
# How many firings of a cron expression are checked against the shortest interval: enough to
# see every gap of any expression whose pattern repeats within a day (minutes × hours).
_INTERVAL_CHECKS = 1500


class ScheduleRefused(ValueError):
    """A schedule that cannot be made; the message says why, for people and the model."""


def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def next_cron_run(cron: str, timezone: str, after: float) -> float | None:
    """The first time strictly after `after` (epoch seconds) that `cron` matches in
    `timezone`, as epoch seconds; None if it never matches again."""
    start = datetime.fromtimestamp(after, tz=_zone(timezone))
    try:
        found = next(iter(CronSim(cron, start)))
    except (CronSimError, StopIteration):
        return None
    return found.timestamp()


def check_cron(cron: str, timezone: str, now: float, min_interval_s: float) -> float:
    """The first run of a valid cron expression; `ScheduleRefused` if it is not a 5-field
    expression, never runs, or runs more often than every `min_interval_s`."""
    fields = cron.split()
    if len(fields) != 5:
        raise ScheduleRefused(
            "A cron expression has 5 fields: minute hour day-of-month month day-of-week, "
            "e.g. `0 9 * * 1` for 9:00 every Monday."
        )
    expression = " ".join(fields)
    try:
        runs = iter(CronSim(expression, datetime.fromtimestamp(now, tz=_zone(timezone))))
        first = next(runs).timestamp()
    except CronSimError as error:
        raise ScheduleRefused(f"`{expression}` is not a valid cron expression ({error}).") from None
    except StopIteration:
        raise ScheduleRefused(f"`{expression}` never runs.") from None
    previous = first
    for _ in range(_INTERVAL_CHECKS):
        try:
            following = next(runs).timestamp()
        except StopIteration:
            break
        if following - previous < min_interval_s:
            raise ScheduleRefused(
                f"`{expression}` runs more often than every {min_interval_s / 60:g} minutes, "
                "the shortest interval allowed here."
            )
        previous = following
        if following - first > 8 * 24 * 3600:  # a week and a day: every pattern seen
            break
    return first


def parse_local_time(text: str, timezone: str) -> float:
    """`YYYY-MM-DD HH:MM` (or ISO 8601, `T` allowed) in `timezone`, or with its own UTC
    offset, as epoch seconds. A wall time skipped by a DST change moves forward by the gap."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise ScheduleRefused(
            f"I can't read the time `{text[:60]}`; write it as YYYY-MM-DD HH:MM "
            f"(in the channel's time zone, {timezone})."
        ) from None
    if parsed.tzinfo is None:
        zone = _zone(timezone)
        local = parsed.replace(tzinfo=zone)
        # A wall time that does not exist (clocks went forward) does not survive a round trip
        # through UTC; fold=0 already reads it with the offset before the change, i.e. later.
        return local.timestamp()
    return parsed.timestamp()


def describe_time(at: float, timezone: str) -> str:
    local = datetime.fromtimestamp(at, tz=_zone(timezone))
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()}"


@dataclass(slots=True, frozen=True)
class NewSchedule:
    prompt: str
    cron: str | None = None
    at: str | None = None


class Schedules:
    """A channel's schedules as people and the model change them: checked and bounded."""

    def __init__(
        self,
        store: ConversationStore,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self._clock = clock

    @property
    def limits(self) -> ScheduleSettings:
        return self.settings.schedules

    async def create(
        self, channel_key: str, new: NewSchedule, *, by_id: str, by_name: str
    ) -> Schedule:
        """Check and store a schedule; `ScheduleRefused` with the reason otherwise."""
        prompt = "".join(ch for ch in new.prompt if ch.isprintable() or ch in "\n\t").strip()
        if not prompt:
            raise ScheduleRefused("Say what to do when it runs (the prompt).")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ScheduleRefused(f"The prompt may have at most {MAX_PROMPT_CHARS:,} characters.")
        if (new.cron is None) == (new.at is None):
            raise ScheduleRefused("Give either a cron expression (recurring) or a time (once).")
        stored = ChannelConfig.from_stored(await self.store.get_channel_config(channel_key))
        timezone = channel_timezone(self.settings, channel_key, stored)
        now = self._clock()
        cron: str | None = None
        if new.cron is not None:
            cron = " ".join(new.cron.split())
            # Up to ~1,500 cron steps: off the event loop.
            first = await asyncio.to_thread(
                check_cron, cron, timezone, now, self.limits.min_interval_minutes * 60.0
            )
        else:
            assert new.at is not None
            first = parse_local_time(new.at, timezone)
            if first <= now:
                raise ScheduleRefused(
                    f"{describe_time(first, timezone)} has passed (now: "
                    f"{describe_time(now, timezone)})."
                )
            if first - now > MAX_AHEAD_DAYS * 86400:
                raise ScheduleRefused(f"A one-off time may be at most {MAX_AHEAD_DAYS} days ahead.")
        try:
            made = await self.store.add_schedule(
                channel_key,
                prompt=prompt,
                cron=cron,
                timezone=timezone,
                next_run_at=first,
                by_id=by_id,
                by_name=by_name,
                max_active=self.limits.max_per_channel,
            )
        except TooManySchedules:
            raise ScheduleRefused(
                f"This channel has {self.limits.max_per_channel} schedules, the most it may "
                "have; cancel one first."
            ) from None
        log.info("schedule %s in %s created by %s", made.id, channel_key, by_id)
        return made

    async def listing(self, channel_key: str) -> str:
        found = await self.store.schedules(channel_key)
        if not found:
            return "This channel has no schedules."
        lines = [f"This channel's schedules ({len(found)} of {self.limits.max_per_channel}):"]
        lines += [describe_schedule(s) for s in found]
        return "\n".join(lines)

    async def cancel(self, channel_key: str, schedule_id: int) -> bool:
        return await self.store.cancel_schedule(channel_key, schedule_id)


def describe_schedule(schedule: Schedule) -> str:
    when = f"cron `{schedule.cron}`" if schedule.cron is not None else "once"
    upcoming = (
        describe_time(schedule.next_run_at, schedule.timezone)
        if schedule.next_run_at is not None
        else "not again"
    )
    prompt = schedule.prompt if len(schedule.prompt) <= 200 else schedule.prompt[:199] + "…"
    return (
        f"#{schedule.id}: {when} ({schedule.timezone}), next {upcoming}, set up by "
        f"{schedule.created_by_name}: {prompt}"
    )


def next_after(schedule: Schedule, now: float) -> float | None:
    """When a due schedule runs next, counted from `now`: so a schedule that was due many
    times while the process was down runs once now, then at its next time after now."""
    if schedule.cron is None:
        return None
    return next_cron_run(schedule.cron, schedule.timezone, now)


# -- the tool --------------------------------------------------------------------------------


class ScheduleParams(BaseModel):
    action: Literal["create", "list", "cancel"]
    prompt: str | None = Field(
        default=None,
        description="create: what to do when it runs, written as a request to you "
        "(e.g. 'Summarise last week's threads in #incidents').",
    )
    cron: str | None = Field(
        default=None,
        description="create, recurring: a 5-field cron expression in the channel's time zone "
        "(minute hour day-of-month month day-of-week), e.g. '0 9 * * 1' for 9:00 on Mondays.",
    )
    at: str | None = Field(
        default=None,
        description="create, once: 'YYYY-MM-DD HH:MM' in the channel's time zone.",
    )
    id: int | None = Field(default=None, description="cancel: the schedule's id.")


class ScheduleTool(AgentTool[ScheduleParams]):
    """Creates, lists and cancels the schedules of the channel this run is in (bound when
    built; the channel never comes from the arguments)."""

    name = "schedule"
    label = "Schedule"
    description = (
        "Schedule work in this channel: a recurring task (cron) or a one-off (at), run later "
        "as a new message and thread in this channel, attributed to the person who asked. "
        "Use it when people ask for something to happen at a time or regularly. "
        "action=create needs prompt and either cron or at; action=list shows this channel's "
        "schedules; action=cancel needs id. Times are in the channel's time zone."
    )
    parameters = ScheduleParams
    execution_mode = "sequential"

    def __init__(self, schedules: Schedules, channel_key: str) -> None:
        self._schedules = schedules
        self._channel_key = channel_key

    async def execute(self, call_id: str, params: ScheduleParams, ctx: ToolContext) -> ToolResult:
        key = self._channel_key
        if params.action == "list":
            return ToolResult.text(await self._schedules.listing(key))
        if params.action == "cancel":
            if params.id is None:
                raise ToolError("Give the id of the schedule to cancel (see action=list).")
            if not await self._schedules.cancel(key, params.id):
                raise ToolError(f"This channel has no active schedule #{params.id}.")
            return ToolResult.text(f"Cancelled schedule #{params.id}.")
        if ctx.caller is None:
            raise ToolError("A schedule needs a person to attribute it to; none asked here.")
        try:
            made = await self._schedules.create(
                key,
                NewSchedule(prompt=params.prompt or "", cron=params.cron, at=params.at),
                by_id=ctx.caller.id,
                by_name=ctx.caller.name,
            )
        except ScheduleRefused as refused:
            raise ToolError(str(refused)) from None
        return ToolResult.text("Scheduled. " + describe_schedule(made))

    def summarize(self, params: ScheduleParams) -> str:
        return f"Schedule: {params.action}"
