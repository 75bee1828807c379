"""Building blocks of the Slack surface tests: a run's events, and reading a thread back."""

from __future__ import annotations

import re
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack.blocks import FEEDBACK_ACTION_ID, STOP_ACTION_ID
from bots.platforms.slack.surface import SlackFeatures, SlackSurface, SurfaceOptions
from bots.surface.contract import RunFinished, RunStarted
from core.events import (
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from core.messages import AssistantMessage, Author, Text, ToolResultMessage, Usage
from core.models.base import TextDelta, ThinkingDelta
from tests.fakes.slack_server import FakeSlack

ALICE = Author(id="UALICE", name="Alice")
CHANNEL = "C0CHAN"
RUN_ID = 41
_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)


class Reply:
    """An assistant reply as the loop streams it: one working copy, growing."""

    def __init__(self) -> None:
        self.partial = AssistantMessage(content=[])

    def start(self) -> MessageStart:
        return MessageStart(message=self.partial)

    def text(self, delta: str) -> MessageUpdate:
        if not self.partial.content or not isinstance(self.partial.content[-1], Text):
            self.partial.content.append(Text(text=""))
        last = self.partial.content[-1]
        assert isinstance(last, Text)
        last.text += delta
        return MessageUpdate(
            message=self.partial,
            delta=TextDelta(partial=self.partial, index=len(self.partial.content) - 1, delta=delta),
        )

    def thinking(self, delta: str) -> MessageUpdate:
        return MessageUpdate(
            message=self.partial, delta=ThinkingDelta(partial=self.partial, index=0, delta=delta)
        )

    def end(self) -> MessageEnd:
        return MessageEnd(message=self.partial.model_copy(deep=True))


def started(run_id: int = RUN_ID) -> RunStarted:
    return RunStarted(conversation_key="slack:T0TEAM:C0CHAN:1", run_id=run_id, author=ALICE)


def finished(
    text: str,
    outcome: Any = "done",
    *,
    error_text: str | None = None,
    reference: str | None = None,
    run_id: int = RUN_ID,
) -> RunFinished:
    return RunFinished(
        conversation_key="slack:T0TEAM:C0CHAN:1",
        run_id=run_id,
        outcome=outcome,
        usage=Usage(input=1200, output=345, cost=0.0123),
        final_text=text,
        error_text=error_text,
        reference=reference,
    )


def tool_start(call_id: str, name: str, label: str, **arguments: Any) -> ToolExecutionStart:
    return ToolExecutionStart(call_id, name, arguments, label=label)


def tool_end(
    call_id: str, name: str, output: str, *, error: bool = False, duration: float = 1.25
) -> ToolExecutionEnd:
    result = ToolResultMessage(
        tool_call_id=call_id, tool_name=name, content=[Text(text=output)], is_error=error
    )
    return ToolExecutionEnd(call_id, name, result, duration)


def make_surface(
    client: AsyncWebClient,
    fake: FakeSlack,
    *,
    streaming: bool = True,
    status_line: bool = False,
    usage_footer: bool = False,
    sleeps: list[float] | None = None,
    channel: str = CHANNEL,
    working_delay_s: float = 0.0,
    update_interval_s: float = 0.02,
) -> tuple[SlackSurface, dict[str, Any]]:
    """A surface for a fresh mention of Alice's in `channel`; returns it and her message.
    `working_delay_s` 0 (the default): every run counts as slow, 👀 and the status line at
    once; a large value: a quick answer, which never shows them."""
    fake.streaming_error = None if streaming else "unknown_method"
    question = fake.seed_message(channel, "<@UBOT> question", user=ALICE.id)

    async def no_wait(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    surface = SlackSurface(
        client,
        team_id=fake.team_id,
        channel=channel,
        thread_ts=question["ts"],
        message_ts=question["ts"],
        user_id=ALICE.id,
        features=SlackFeatures(streaming=True, status_line=status_line),
        options=SurfaceOptions(
            usage_footer=usage_footer,
            update_interval_s=update_interval_s,
            activity_delay_s=3600,
            working_delay_s=working_delay_s,
        ),
        sleep=no_wait,
    )
    return surface, question


# -- reading the thread back ---------------------------------------------------------------


def markdown_of(message: dict[str, Any]) -> str:
    """The Markdown a message shows: its markdown blocks, or a streamed message's text."""
    parts = [b["text"] for b in message.get("blocks", []) if b["type"] == "markdown"]
    if parts:
        return "\n".join(parts)
    if "streaming" in message:
        return str(message["text"])
    return ""


def action_ids(message: dict[str, Any]) -> list[str]:
    ids = []
    for block in message.get("blocks", []):
        for element in block.get("elements", []):
            if "action_id" in element:
                ids.append(element["action_id"])
    return ids


def has_stop(message: dict[str, Any]) -> bool:
    return STOP_ACTION_ID in action_ids(message)


def has_feedback(message: dict[str, Any]) -> bool:
    return FEEDBACK_ACTION_ID in action_ids(message)


def context_texts(message: dict[str, Any]) -> list[str]:
    return [
        element["text"]
        for block in message.get("blocks", [])
        if block["type"] == "context"
        for element in block["elements"]
    ]


def fences_balanced(text: str) -> bool:
    return len(_FENCE.findall(text)) % 2 == 0
