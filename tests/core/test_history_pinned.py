"""History repair as a model and the runner's recovery see it: what is sent, and what a call
that never finished is reported as."""

from __future__ import annotations

from core.history import (
    interrupted_result,
    is_replayable,
    repair_history,
    unanswered_tool_calls,
)
from core.messages import (
    AssistantMessage,
    Message,
    StopReason,
    Text,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def reply(
    text: str = "", *calls: tuple[str, str], stop: StopReason | None = None
) -> AssistantMessage:
    content: list[Text | ToolCall] = [Text(text=text)] if text else []
    content += [ToolCall(id=call_id, name=name, arguments={}) for call_id, name in calls]
    reason: StopReason = stop or ("tool_use" if calls else "stop")
    return AssistantMessage(content=content, stop_reason=reason)


def result(call_id: str, name: str = "read", text: str = "ok") -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name=name, content=[Text(text=text)])


def texts(messages: list[Message]) -> list[str]:
    shown = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            shown.append(f"result {message.tool_call_id}: {message.content[0].text}")  # type: ignore[union-attr]
        else:
            shown.append(f"{message.role}: {message.text()}")
    return shown


def test_a_conversation_of_plain_turns_is_sent_whole_and_in_order() -> None:
    history: list[Message] = [user("one"), reply("two"), user("three"), reply("four"), user("five")]
    assert repair_history(history) == history


def test_an_interrupted_call_is_reported_to_the_model_as_an_error_it_can_act_on() -> None:
    synthetic = interrupted_result("call_7", "bash")

    assert synthetic.tool_call_id == "call_7" and synthetic.tool_name == "bash"
    assert synthetic.is_error is True
    # Shown to the model and to people reading the transcript; stored details say why.
    assert synthetic.details == {"interrupted": True}
    [text] = synthetic.content
    assert isinstance(text, Text)
    assert "interrupted" in text.text and "run it again" in text.text


def test_a_call_left_without_a_result_gets_the_interrupted_result_directly_after_it() -> None:
    history: list[Message] = [user("list"), reply("", ("c1", "ls"))]
    repaired = repair_history(history)

    assert repaired[:2] == history
    [synthetic] = repaired[2:]
    assert isinstance(synthetic, ToolResultMessage)
    expected = interrupted_result("c1", "ls")
    assert synthetic.model_dump(exclude={"timestamp"}) == expected.model_dump(exclude={"timestamp"})


def test_failed_and_stopped_replies_are_not_sent_and_nothing_after_them_is_lost() -> None:
    failed = reply("half an answer", stop="error")
    stopped = reply("", ("c1", "ls"), stop="aborted")
    history: list[Message] = [user("a"), failed, user("b"), stopped, user("c"), reply("d")]

    assert texts(repair_history(history)) == ["user: a", "user: b", "user: c", "assistant: d"]
    assert not is_replayable(failed) and not is_replayable(stopped)
    assert is_replayable(reply("fine")) and is_replayable(user("a"))


def test_a_result_for_a_call_that_is_not_sent_is_dropped_and_the_rest_kept() -> None:
    history: list[Message] = [user("a"), result("ghost"), reply("b"), result("ghost2"), user("c")]
    assert texts(repair_history(history)) == ["user: a", "assistant: b", "user: c"]


def test_results_follow_their_calls_in_call_order_and_the_first_of_duplicates_wins() -> None:
    history: list[Message] = [
        user("go"),
        reply("", ("c1", "read"), ("c2", "grep")),
        result("c2", "grep", "second"),
        result("c1", "read", "first"),
        result("c1", "read", "a repeat"),
        reply("done"),
    ]
    assert texts(repair_history(history)) == [
        "user: go",
        "assistant: ",
        "result c1: first",
        "result c2: second",
        "assistant: done",
    ]


def test_a_message_that_arrived_during_a_batch_is_sent_after_its_results() -> None:
    history: list[Message] = [
        user("go"),
        reply("", ("c1", "read"), ("c2", "read")),
        result("c1"),
        user("meanwhile one"),
        user("meanwhile two"),
        result("c2"),
        reply("", ("c3", "read")),
        result("c3"),
        reply("end"),
    ]
    assert texts(repair_history(history)) == [
        "user: go",
        "assistant: ",
        "result c1: ok",
        "result c2: ok",
        "user: meanwhile one",
        "user: meanwhile two",
        "assistant: ",
        "result c3: ok",
        "assistant: end",
    ]


def test_repair_leaves_the_stored_list_as_it_was() -> None:
    history: list[Message] = [user("go"), reply("", ("c1", "ls")), user("later")]
    before = [message.model_copy(deep=True) for message in history]
    repair_history(history)
    assert history == before


def test_unanswered_calls_are_those_of_sent_replies_without_a_result() -> None:
    history: list[Message] = [
        user("go"),
        reply("", ("c1", "read"), ("c2", "grep")),
        result("c1"),
        reply("", ("c3", "ls"), stop="aborted"),  # not replayed: its calls need no result
        reply("", ("c4", "bash")),
    ]
    assert unanswered_tool_calls(history) == [("c2", "grep"), ("c4", "bash")]
    answered = [*history, result("c2", "grep"), result("c4", "bash")]
    assert unanswered_tool_calls(answered) == []
    assert unanswered_tool_calls([user("hi"), reply("hello")]) == []
