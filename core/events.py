"""Events a run yields, in pi's order. Consume them with `match` and `assert_never`.

Owns: the `AgentEvent` union. Events flow one way: loop -> runner -> surface.

Order of one run, as a tree::

    agent_start
    ├─ turn_start                                   (one per model call, up to the turn cap)
    │  ├─ message_start / message_end               steering or follow-up user messages
    │  │                                            delivered before this model call, in order
    │  ├─ message_start                             the assistant reply begins
    │  │  ├─ message_update *                       text / thinking / tool-call argument deltas
    │  ├─ message_end                               the completed assistant message
    │  ├─ tool_execution_start                      per tool call, in the model's order
    │  │  ├─ tool_execution_update *                partial results from `on_update`
    │  ├─ tool_execution_end                        per tool call, in completion order
    │  ├─ message_start / message_end               each tool result, in the model's order
    │  └─ turn_end                                  the assistant message and its tool results
    └─ agent_end                                    every message the run added, and why it ended

`message_end` is the moment a message is complete and may be persisted. The loop emits
`message_start`/`message_end` for steering and follow-up messages it injects, but never for the
messages the caller put in the context before the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from core.messages import AssistantMessage, Message, ToolResultMessage
from core.models.base import StreamDelta
from core.tools import ToolResult

EndReason: TypeAlias = Literal["stop", "error", "aborted", "turn_limit"]


@dataclass(slots=True, frozen=True)
class AgentStart:
    type: Literal["agent_start"] = "agent_start"


@dataclass(slots=True, frozen=True)
class TurnStart:
    turn: int
    type: Literal["turn_start"] = "turn_start"


@dataclass(slots=True, frozen=True)
class MessageStart:
    message: Message
    type: Literal["message_start"] = "message_start"


@dataclass(slots=True, frozen=True)
class MessageUpdate:
    """An assistant delta. `message` is the partial reply so far (a working copy: don't keep)."""

    message: AssistantMessage
    delta: StreamDelta
    type: Literal["message_update"] = "message_update"


@dataclass(slots=True, frozen=True)
class MessageEnd:
    message: Message
    type: Literal["message_end"] = "message_end"


@dataclass(slots=True, frozen=True)
class ToolExecutionStart:
    """A tool call starts. `label` is the tool's own short description of the call for people
    ("Read README.md"; `AgentTool.summarize`), or the tool's name."""

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    label: str = ""
    type: Literal["tool_execution_start"] = "tool_execution_start"


@dataclass(slots=True, frozen=True)
class ToolExecutionUpdate:
    tool_call_id: str
    tool_name: str
    partial: ToolResult
    type: Literal["tool_execution_update"] = "tool_execution_update"


@dataclass(slots=True, frozen=True)
class ToolExecutionEnd:
    tool_call_id: str
    tool_name: str
    result: ToolResultMessage
    duration_s: float
    type: Literal["tool_execution_end"] = "tool_execution_end"

    @property
    def is_error(self) -> bool:
        return self.result.is_error


@dataclass(slots=True, frozen=True)
class TurnEnd:
    turn: int
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    type: Literal["turn_end"] = "turn_end"


@dataclass(slots=True, frozen=True)
class AgentEnd:
    """The run is over. `messages` are those it added; `reason` says why it ended.
    `undelivered` are steering messages the loop took but never delivered (the turn cap or a
    stop came first): the caller answers them in another run or says why not."""

    messages: list[Message]
    reason: EndReason
    error_message: str | None = None
    undelivered: list[Message] = field(default_factory=list)
    type: Literal["agent_end"] = "agent_end"


AgentEvent: TypeAlias = (
    AgentStart
    | TurnStart
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
    | TurnEnd
    | AgentEnd
)
