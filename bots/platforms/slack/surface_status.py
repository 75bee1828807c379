"""The quiet signs of a run in Slack: reactions on the person's message and the assistant
status line.

Owns: `Reactions` (👀 for a slow answer or a queued steered message, the outcome's mark at the
end: the shared marks of `bots.surface.base`, by Slack's names) and `StatusLine` (the
assistant thread's "thinking…" / "running grep…", throttled, from the working delay on, and
given up on where Slack refuses it).

Must not: decide when a run is slow or over (the surface's state machine does).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Literal

from slack_sdk.errors import SlackApiError

from bots.platforms.slack.stream import NO_STREAMING
from bots.platforms.slack.surface_calls import TRANSPORT_ERRORS, ThreadCalls, error_code
from bots.platforms.slack.surface_options import SlackFeatures
from bots.surface.base import OUTCOME_EMOJI_NAME
from bots.surface.contract import RunOutcome
from bots.surface.throttle import Throttle

log = logging.getLogger(__name__)

WORKING_REACTION = "eyes"
DONE_REACTION = OUTCOME_EMOJI_NAME["done"]
STOPPED_REACTION = OUTCOME_EMOJI_NAME["aborted"]
INTERRUPTED_REACTION = OUTCOME_EMOJI_NAME["interrupted"]
FAILED_REACTION = OUTCOME_EMOJI_NAME["error"]
THINKING_STATUS = "thinking…"

# Errors meaning the workspace has no status line: every surface stops trying.
_NO_STATUS_LINE = NO_STREAMING | {"invalid_arguments"}


class Reactions:
    """Reactions on the person's message (none without one, or when switched off)."""

    def __init__(self, calls: ThreadCalls, message_ts: str | None, *, enabled: bool) -> None:
        self._calls = calls
        self._message_ts = message_ts
        self.enabled = enabled and message_ts is not None
        self.working_shown = False  # 👀 was (or is being) added: it must go at the end

    async def show_working(self) -> None:
        if self.enabled:
            self.working_shown = True
            await self._calls.react(self._message_ts, WORKING_REACTION, add=True)

    async def acknowledge(self, ack: Literal["queued", "read"]) -> None:
        """A steered message: 👀 while queued, ✅ once read."""
        await self._calls.react(self._message_ts, WORKING_REACTION, add=ack == "queued")
        if ack == "read":
            await self._calls.react(self._message_ts, DONE_REACTION, add=True)

    async def show_outcome(self, outcome: RunOutcome, *, recovered: bool) -> None:
        """👀 goes (also an earlier process's, after a restart); the outcome's mark comes."""
        if not self.enabled:
            return
        if self.working_shown or recovered:
            await self._calls.react(self._message_ts, WORKING_REACTION, add=False)
        await self._calls.react(self._message_ts, OUTCOME_EMOJI_NAME[outcome], add=True)


class StatusLine:
    """The assistant status line of one thread, where the workspace has it."""

    def __init__(self, calls: ThreadCalls, features: SlackFeatures, interval_s: float) -> None:
        self._calls = calls
        self._features = features
        self._allowed = False  # it waits for the working delay
        self._wanted = ""
        self._sent = ""
        self._used = False
        self._off = False  # Slack refused it in this thread
        self._throttle = Throttle(self._flush, interval_s)

    def want(self, status: str) -> None:
        if self._features.status_line and not self._off:
            self._wanted = status
            if self._allowed:
                self._throttle.request()

    def allow(self) -> None:
        """The run is slow: the status line shows from now on."""
        self._allowed = True
        if self._wanted:
            self._throttle.request()

    async def close(self) -> None:
        await self._throttle.close()

    async def clear(self) -> None:
        await self._throttle.close()
        if not self._used or self._off:
            return
        with contextlib.suppress(SlackApiError, *TRANSPORT_ERRORS):
            await self._calls.call(
                self._calls.client.assistant_threads_setStatus,
                idempotent=True,
                channel_id=self._calls.channel,
                thread_ts=self._calls.thread_ts,
                status="",
            )

    async def _flush(self) -> None:
        wanted = self._wanted
        if wanted == self._sent or self._off or not self._features.status_line:
            return
        self._used = True
        try:
            await self._calls.call(
                self._calls.client.assistant_threads_setStatus,
                idempotent=True,
                channel_id=self._calls.channel,
                thread_ts=self._calls.thread_ts,
                status=wanted,
            )
        except SlackApiError as error:
            log.info("no assistant status line here (%s)", error_code(error))
            self._off = True
            if error_code(error) in _NO_STATUS_LINE:
                self._features.status_line = False
            return
        except TRANSPORT_ERRORS:
            return
        self._sent = wanted
