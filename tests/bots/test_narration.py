"""The narration rule every surface follows (bots/surface/narration.py): a reply calling tools shows
its text, else its thinking (stripped, bounded); a final answer never shows its thinking."""

from __future__ import annotations

from bots.surface.narration import NARRATION_CHARS, thinking_narration, visible_text
from core.messages import (
    AssistantContent,
    AssistantMessage,
    RedactedThinking,
    StopReason,
    Text,
    Thinking,
    ToolCall,
)

CALL = ToolCall(id="toolu_1", name="read", arguments={"path": "deploy.log"})


def reply(*content: AssistantContent, stop_reason: StopReason | None = None) -> AssistantMessage:
    calls = any(isinstance(part, ToolCall) for part in content)
    return AssistantMessage(
        content=list(content), stop_reason=stop_reason or ("tool_use" if calls else "stop")
    )


def test_thinking_narrates_a_reply_that_calls_tools_without_text() -> None:
    message = reply(Thinking(thinking="  Checking the deploy log.\n", signature="sig"), CALL)
    assert thinking_narration(message) == "Checking the deploy log."
    assert visible_text(message) == "Checking the deploy log."


def test_a_replys_own_text_wins_over_its_thinking() -> None:
    message = reply(
        Thinking(thinking="Private musing.", signature="sig"),
        Text(text="Let me check the deploy log…"),
        CALL,
    )
    assert thinking_narration(message) == ""
    assert visible_text(message) == "Let me check the deploy log…"


def test_a_final_answer_never_shows_its_thinking() -> None:
    answer = reply(Thinking(thinking="The log says the disk is full.", signature="s"))
    assert thinking_narration(answer) == ""
    assert visible_text(answer) == ""
    with_text = reply(Thinking(thinking="Musing.", signature="s"), Text(text="It failed."))
    assert visible_text(with_text) == "It failed."


def test_empty_omitted_and_redacted_thinking_show_nothing() -> None:
    omitted = reply(Thinking(thinking="", signature="sig"), CALL)  # display "omitted"
    blank = reply(Thinking(thinking=" \n\t ", signature="sig"), CALL)
    redacted = reply(RedactedThinking(data="opaque"), CALL)
    for message in (omitted, blank, redacted):
        assert thinking_narration(message) == ""
        assert visible_text(message) == ""


def test_whitespace_text_does_not_hide_the_thinking() -> None:
    message = reply(Thinking(thinking="Reading the config.", signature="s"), Text(text="\n"), CALL)
    assert visible_text(message) == "Reading the config."


def test_several_thinking_blocks_are_joined_blank_ones_skipped() -> None:
    message = reply(
        Thinking(thinking="Found it.", signature="a"),
        Thinking(thinking="   ", signature="b"),
        Thinking(thinking="Now reading the config.", signature="c"),
        CALL,
    )
    assert thinking_narration(message) == "Found it.\n\nNow reading the config."


def test_a_failed_or_stopped_reply_is_not_narrated() -> None:
    stops: tuple[StopReason, ...] = ("error", "aborted")
    for stop in stops:
        message = reply(Thinking(thinking="About to read.", signature="s"), CALL, stop_reason=stop)
        assert thinking_narration(message) == ""


def test_long_thinking_is_cut_at_a_word_with_an_ellipsis() -> None:
    long = " ".join(f"word{i}" for i in range(500))
    narration = thinking_narration(reply(Thinking(thinking=long, signature="s"), CALL))
    assert len(narration) <= NARRATION_CHARS
    assert narration.endswith("…")
    assert long.startswith(narration[:-1])
    assert narration[:-1].split()[-1] in long.split()  # no word cut in two
    unbroken = "x" * 5_000
    cut = thinking_narration(reply(Thinking(thinking=unbroken, signature="s"), CALL), limit=50)
    assert cut == "x" * 49 + "…"
