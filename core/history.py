"""History repair: make any stored conversation safe to replay to a model.

Owns the rules applied before a model call (docs/architecture.md, "History"):
- assistant messages that errored or were aborted are not sent;
- every tool call of a sent assistant message gets a result directly after it: a missing one
  gets a synthetic error result saying the call was interrupted;
- tool results that answer no sent tool call are not sent.

A crash or a cancel can therefore never leave a conversation that a model refuses.
"""

from __future__ import annotations

from core.messages import AssistantMessage, Message, Text, ToolResultMessage

INTERRUPTED_TEXT = (
    "This tool call was interrupted before it finished (the run was stopped or restarted). "
    "Its outcome is unknown; run it again if it is still needed."
)


def interrupted_result(tool_call_id: str, tool_name: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        content=[Text(text=INTERRUPTED_TEXT)],
        details={"interrupted": True},
        is_error=True,
    )


def is_replayable(message: Message) -> bool:
    """False for assistant messages that must not be sent to a model again."""
    return not (
        isinstance(message, AssistantMessage) and message.stop_reason in ("error", "aborted")
    )


def repair_history(messages: list[Message]) -> list[Message]:
    """The messages to send, repaired. Returns the same objects (and synthetic results);
    never mutates `messages`. One pass, O(n).

    The runner stores messages in delivery order, so for its history this reordering is a
    no-op. Conversations stored before that stored arrival order: a message that arrived while
    a tool batch ran sits before the batch's results but was delivered after them. So the
    results of an assistant message are gathered from everything up to the next assistant
    message, and user messages found in between follow them.
    """
    repaired: list[Message] = []
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        index += 1
        if isinstance(message, ToolResultMessage):
            continue  # an orphan: its call was not sent (results are consumed below)
        if not isinstance(message, AssistantMessage):
            repaired.append(message)
            continue
        if not is_replayable(message):
            continue
        repaired.append(message)
        calls = message.tool_calls()
        if not calls:
            continue
        results: dict[str, ToolResultMessage] = {}
        arrived_meanwhile: list[Message] = []
        while index < count and not isinstance(messages[index], AssistantMessage):
            following = messages[index]
            if isinstance(following, ToolResultMessage):
                results.setdefault(following.tool_call_id, following)
            else:
                arrived_meanwhile.append(following)
            index += 1
        for call in calls:
            repaired.append(results.get(call.id) or interrupted_result(call.id, call.name))
        repaired.extend(arrived_meanwhile)
    return repaired


def unanswered_tool_calls(messages: list[Message]) -> list[tuple[str, str]]:
    """(id, name) of tool calls in replayable assistant messages that have no result."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}
    return [
        (call.id, call.name)
        for m in messages
        if isinstance(m, AssistantMessage) and is_replayable(m)
        for call in m.tool_calls()
        if call.id not in answered
    ]
