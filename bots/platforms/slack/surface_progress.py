"""The in-progress message of a run in Slack: the Stop button, one attachment per tool call,
and the answer so far where it does not stream natively.

Owns: `ProgressMessage`: posting it once, then updating it only when what it shows changed,
and the quiet window after a 429 (nothing is written until its Retry-After has passed; then
the state of that moment is shown, so no update is queued behind another).

Must not: decide when the message is due (the surface's state machine does) or what it says
(`bots.platforms.slack.blocks.progress_message`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError

from bots.platforms.slack import blocks
from bots.platforms.slack.surface_calls import ThreadCalls, retry_after
from bots.platforms.slack.surface_options import Outbox


class ProgressMessage:
    def __init__(
        self, calls: ThreadCalls, outbox: Outbox, *, request_flush: Callable[[], None]
    ) -> None:
        self._calls = calls
        self._outbox = outbox
        self._request_flush = request_flush
        self._last: tuple[str, str, str] | None = None  # what it shows, to skip repeats
        self._quiet_until = 0.0  # no writes before this (monotonic), after a 429

    @property
    def quiet(self) -> bool:
        """A write got a 429 and its Retry-After has not passed."""
        return time.monotonic() < self._quiet_until

    def back_off(self, error: SlackApiError) -> None:
        """A progress write got a 429: skip updates until Retry-After, then show the latest."""
        delay = retry_after(error)
        self._quiet_until = time.monotonic() + delay
        asyncio.get_running_loop().call_later(delay, self._request_flush)

    def adopt(self, ts: str) -> None:
        """A message already in the thread (a retired stream's) is the in-progress message
        from now on: the next `show` updates it."""
        self._outbox.progress_ts = ts
        self._last = None

    async def show(self, body: blocks.MessageBody) -> bool:
        """Post or update the message to show `body`; True if this posted it (the first
        time it is on screen)."""
        key = (body.text, _fingerprint(body.blocks), _fingerprint(body.attachments))
        if key == self._last:
            return False
        posted = False
        if self._outbox.progress_ts is None:
            ts = await self._calls.post(body, part="progress", on_rate_limit=self.back_off)
            if ts is None:
                return False
            self._outbox.progress_ts = ts
            posted = True
        elif not await self._calls.update(
            self._outbox.progress_ts, body, on_rate_limit=self.back_off
        ):
            return False
        self._last = key
        return posted


def _fingerprint(value: Any) -> str:
    return repr(value)
