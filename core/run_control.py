"""The caller's handle on a run in progress: steering, follow-ups and cancellation.

Owns: `RunControl` and `ABORTED_TEXT` (the reason a stop gives when none is named). The loop
(core.loop) takes steering after each tool batch and follow-ups when it would stop; what it took
and did not deliver is handed back in `AgentEnd.undelivered`.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio

from core.messages import Message
from core.tools import CancelSignal

ABORTED_TEXT = "Stopped on request."


class RunControl:
    """The caller's handle on a run in progress: steer it, queue follow-ups, cancel it.

    Safe to use before the run starts and after it ended (late messages simply stay queued;
    `take_pending` returns them so the caller can deliver them to the next run).
    """

    def __init__(self) -> None:
        self.signal = CancelSignal()
        self._steering: list[Message] = []
        self._follow_ups: list[Message] = []
        self._task: asyncio.Task[None] | None = None

    def steer(self, message: Message) -> None:
        """Deliver `message` after the current tool batch, before the next model call."""
        self._steering.append(message)

    def follow_up(self, message: Message) -> None:
        """Deliver `message` when the run would otherwise stop."""
        self._follow_ups.append(message)

    def cancel(self, reason: str = ABORTED_TEXT) -> None:
        """Stop the run now. The run still ends with its events (an `aborted` message)."""
        if self.signal.cancelled:
            return
        self.signal.cancel(reason)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @property
    def cancelled(self) -> bool:
        return self.signal.cancelled

    def take_steering(self) -> list[Message]:
        taken, self._steering = self._steering, []
        return taken

    def take_follow_ups(self) -> list[Message]:
        taken, self._follow_ups = self._follow_ups, []
        return taken

    def take_pending(self) -> list[Message]:
        """Everything queued and not yet delivered, steering first."""
        return self.take_steering() + self.take_follow_ups()

    def _attach(self, task: asyncio.Task[None]) -> None:
        # A cancel that came before the run started is seen at its first turn; cancelling a
        # task that has not started would skip its events altogether.
        self._task = task
