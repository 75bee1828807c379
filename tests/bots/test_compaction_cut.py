"""Where compaction cuts: never inside a tool batch (issue 8 H)."""

from __future__ import annotations

from bots.compaction import find_cut
from core.messages import AssistantMessage, Message, Text, ToolCall, ToolResultMessage, UserMessage
from storage.base import StoredMessage


def stored(*messages: Message) -> list[StoredMessage]:
    return [StoredMessage(seq=i + 1, message=m) for i, m in enumerate(messages)]


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name="t", content=[Text(text="r")])


def test_a_user_message_inside_a_tool_batch_is_never_a_cut() -> None:
    calls = [ToolCall(id="a", name="t", arguments={}), ToolCall(id="b", name="t", arguments={})]
    history = stored(
        UserMessage(content="x" * 4_000),
        AssistantMessage(content=calls),
        result("a"),
        UserMessage(content="arrived mid-batch " * 200),  # stored in arrival order
        result("b"),
        AssistantMessage(content=[Text(text="done")]),
        UserMessage(content="next"),
    )
    for keep in (1, 300, 800, 5_000):
        cut = find_cut(history, keep)
        assert cut is not None and cut.recent[0].seq == 7, keep


def test_an_assistant_without_results_closes_its_batch() -> None:
    # A crash left a call unanswered; the next user message is still a place to cut.
    history = stored(
        UserMessage(content="q " * 2_000),
        AssistantMessage(content=[ToolCall(id="a", name="t", arguments={})]),
        AssistantMessage(content=[Text(text="aborted")], stop_reason="aborted"),
        UserMessage(content="again " * 500),
        AssistantMessage(content=[Text(text="ok")]),
    )
    cut = find_cut(history, 100)
    assert cut is not None and cut.recent[0].seq == 4


def test_the_channel_context_note_is_not_summarised_it_is_given_again_after() -> None:
    # The summary would otherwise carry a stale copy of the channel's memory and instructions
    # beside the current one the runner appends after a compaction.
    from bots.compaction import transcript_lines
    from bots.prompt import channel_context_text

    note = UserMessage(content=channel_context_text(instructions="Be brief.", memory=""))
    lines = transcript_lines([UserMessage(content="[Ada] hi"), note])
    assert lines == ["user: [Ada] hi"]
