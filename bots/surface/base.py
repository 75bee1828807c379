"""What every platform's surface shares: the dispatch of events to hooks, and the words and
marks for how a run ended.

Owns: `SurfaceBase` (one `match` over `SurfaceEvent`, in one place, calling a hook per kind of
event; a surface overrides the hooks it shows and ignores the rest) and the outcome and notice
marks, so that a stopped, failed or interrupted answer looks the same on every platform.

A subclass keeps its own state machine (its states named in its docstring); the base holds no
state of its own beyond what `emit` needs to call the hooks.
"""

from __future__ import annotations

from typing import assert_never

from bots.surface.contract import (
    ApprovalDecided,
    ApprovalRequested,
    FileOut,
    Notice,
    NoticeLevel,
    RunFinished,
    RunOutcome,
    RunStarted,
    SurfaceEvent,
)
from core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from core.messages import AssistantMessage
from core.models.base import TextDelta, ThinkingDelta, ToolCallDelta

# How a run ended, as one mark everywhere (a reaction, a head line, an error line).
# "interrupted" (a restart cut it short) is not the person's fault nor a failure of the answer:
# it warns; "error" fails.
OUTCOME_MARK: dict[RunOutcome, str] = {
    "running": "⏳",
    "done": "✅",
    "aborted": "⏹️",
    "interrupted": "⚠️",
    "error": "❌",
}
# The same marks by the names Slack's reactions take.
OUTCOME_EMOJI_NAME: dict[RunOutcome, str] = {
    "running": "hourglass_flowing_sand",
    "done": "white_check_mark",
    "aborted": "black_square_for_stop",
    "interrupted": "warning",
    "error": "x",
}
OUTCOME_WORD: dict[RunOutcome, str] = {
    "running": "Working",
    "done": "Done",
    "aborted": "Stopped",
    "interrupted": "Interrupted",
    "error": "Failed",
}
NOTICE_MARK: dict[NoticeLevel, str] = {"info": "ℹ️", "warning": "⚠️", "error": "❌"}


def outcome_line(outcome: RunOutcome, error_text: str | None, reference: str | None) -> str | None:
    """What an answer's end says about how the run ended (None: it simply answered)."""
    text = " ".join((error_text or "").split())
    if reference and reference not in text:
        text = f"{text} (reference {reference})".strip()
    if outcome == "aborted":
        return f"{OUTCOME_MARK[outcome]} {text}" if text else f"{OUTCOME_MARK[outcome]} Stopped."
    if outcome in ("error", "interrupted"):
        fallback = "This answer did not finish."
        return f"{OUTCOME_MARK[outcome]} {text or fallback}"
    if text:  # done, but with something to say (the turn cap)
        return f"{NOTICE_MARK['info']} {text}"
    return None


class SurfaceBase:
    """A surface whose `emit` calls one hook per kind of event. Every hook is a no-op here; a
    subclass adds `ref` and `close` (the `Surface` protocol) and the hooks it shows."""

    async def emit(self, event: SurfaceEvent) -> None:
        match event:
            case RunStarted():
                await self.on_run_started(event)
            case MessageStart(message=AssistantMessage() as message):
                await self.on_reply_started(message)
            case MessageUpdate(message=AssistantMessage() as message, delta=TextDelta(delta=text)):
                await self.on_text(message, text)
            case MessageUpdate(delta=ThinkingDelta()):
                await self.on_thinking()
            case MessageEnd(message=AssistantMessage() as message):
                await self.on_reply_ended(message)
            case ToolExecutionStart():
                await self.on_tool_started(event)
            case ToolExecutionEnd():
                await self.on_tool_ended(event)
            case Notice():
                await self.on_notice(event)
            case FileOut():
                await self.on_file(event)
            case RunFinished():
                await self.on_run_finished(event)
            case ApprovalRequested():
                await self.on_approval_requested(event)
            case ApprovalDecided():
                await self.on_approval_decided(event)
            case MessageUpdate(delta=ToolCallDelta()):
                pass
            case (
                AgentStart()
                | TurnStart()
                | MessageStart()
                | MessageUpdate()
                | MessageEnd()
                | ToolExecutionUpdate()
                | TurnEnd()
                | AgentEnd()
            ):
                pass  # the loop's bookkeeping, or another role's message: nothing to show
            case _:
                assert_never(event)

    async def on_run_started(self, event: RunStarted) -> None:
        pass

    async def on_reply_started(self, message: AssistantMessage) -> None:
        pass

    async def on_text(self, message: AssistantMessage, delta: str) -> None:
        """A piece of the reply's text (`message` is the reply so far)."""

    async def on_thinking(self) -> None:
        pass

    async def on_reply_ended(self, message: AssistantMessage) -> None:
        """The whole reply: what a slow feed dropped of its deltas is in it."""

    async def on_tool_started(self, event: ToolExecutionStart) -> None:
        pass

    async def on_tool_ended(self, event: ToolExecutionEnd) -> None:
        pass

    async def on_notice(self, event: Notice) -> None:
        pass

    async def on_file(self, event: FileOut) -> None:
        pass

    async def on_run_finished(self, event: RunFinished) -> None:
        pass

    async def on_approval_requested(self, event: ApprovalRequested) -> None:
        pass

    async def on_approval_decided(self, event: ApprovalDecided) -> None:
        pass
