"""Approvals in the terminal: a y/n prompt.

Owns: `TerminalApprovals`, one per terminal conversation: a request shown on `err` (each
call's tool, label and preview, made printable) with the question; in `chat` the next line
typed answers the oldest open question (`y`, `n`, or `a`: approve the rest of this run for
the tool), in `ask` a line is read from the terminal, and `ask` with no terminal denies and
says so. The person at the terminal runs Teammate, so they may decide any request of their
conversation. `ApprovalHooks` is the part of `TerminalSurface` that hands it the events.

Must not: decide anything but through `bots.features.approvals`; print but to `err`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import TextIO

from bots.features.approvals import Approvals
from bots.platforms.terminal.text import printable
from bots.surface.contract import ApprovalDecided, ApprovalRequested, ApprovalView
from core.messages import Author

__all__ = ["NO_TERMINAL_TEXT", "QUESTION", "ApprovalHooks", "ReadLine", "TerminalApprovals"]

QUESTION = "Approve? [y]es / [n]o / [a]ll calls of this tool in this run: "
NO_TERMINAL_TEXT = (
    "No terminal to ask for approval, so it was denied: {label}. Run it in `teammate chat`, "
    "or from a terminal."
)
ReadLine = Callable[[], Awaitable[str | None]] | None  # a line from the terminal, if any
_ANSWERS = {"y": "approve", "yes": "approve", "n": "deny", "no": "deny", "a": "rest"}


class TerminalApprovals:
    """`read_line`: how `ask` reads an answer from the terminal (None there: no terminal, so
    every request is denied). `chat` gives none and answers through `answer` with the lines it
    reads (`interactive` False: piped input, nobody to ask, so denied)."""

    def __init__(
        self,
        approvals: Approvals,
        channel_key: str,
        author: Author,
        err: TextIO,
        read_line: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self._approvals = approvals
        self._channel_key = channel_key
        self._author = author
        self._err = err
        self._read_line = read_line
        self.interactive = read_line is not None
        self._open: deque[ApprovalView] = deque()

    @property
    def asking(self) -> bool:
        return bool(self._open)

    async def requested(self, event: ApprovalRequested) -> None:
        self._say(f"⏸️ Waiting for your approval before this runs ({len(event.requests)}):")
        for view in event.requests:
            self._say(f"  {view.tool_name}: {view.label}")
            for line in view.preview.splitlines():
                self._say(f"    {line}")
        if not self.interactive:
            for view in event.requests:
                self._say(NO_TERMINAL_TEXT.format(label=view.label))
                await self._decide(view, "deny")
            return
        self._open.extend(event.requests)
        if self._read_line is not None:  # `ask`: answer here, one call after another
            self._ask()  # (`answer` asks the next one, or this one again)
            while self._open:
                read = await self._read_line()
                if read is None:
                    self._say("No answer: denied.")
                    while self._open:
                        await self._decide(self._open.popleft(), "deny")
                    return
                if not await self.answer(read):
                    self._say("(Please answer y, n or a.)")
        else:
            self._ask()

    async def answer(self, line: str) -> bool:
        """`chat`: a line typed while a question is open answers it (True: it was taken). Any
        other line is a message as always (steered into the waiting run), and the question is
        asked again."""
        if not self._open:
            return False
        choice = _ANSWERS.get(line.strip().lower())
        if choice is None:
            self._ask()
            return False
        await self._decide(self._open.popleft(), choice)
        if self._open:
            self._ask()
        return True

    def decided(self, event: ApprovalDecided) -> None:
        self._open = deque(v for v in self._open if v.approval_id != event.approval_id)
        self._say(printable(event.text))

    async def _decide(self, view: ApprovalView, choice: str) -> None:
        outcome, _ = await self._approvals.decide(
            view.approval_id,
            approve=choice != "deny",
            rest_of_run=choice == "rest",
            by=self._author,
            is_admin=True,  # the person at the terminal runs Teammate
            channel_keys=(self._channel_key,),
        )
        if outcome != "decided":
            self._say(f"({view.label}: {outcome.replace('_', ' ')})")

    def _ask(self) -> None:
        view = self._open[0]
        self._err.write(printable(f"{view.tool_name}: {view.label} — {QUESTION}"))
        self._err.flush()

    def _say(self, text: str) -> None:
        self._err.write(printable(text) + "\n")
        self._err.flush()


class ApprovalHooks:
    """A base of `TerminalSurface`: `approvals` is set by `ask` and `chat`."""

    approvals: TerminalApprovals | None = None

    async def on_approval_requested(self, event: ApprovalRequested) -> None:
        if self.approvals is not None:
            await self.approvals.requested(event)

    async def on_approval_decided(self, event: ApprovalDecided) -> None:
        if self.approvals is not None:
            self.approvals.decided(event)
