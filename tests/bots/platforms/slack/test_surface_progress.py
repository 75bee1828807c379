"""What the Slack thread shows while a run is still going: the in-progress message's text,
status line and tool calls as they change, and when its Stop button goes up beside a stream."""

from __future__ import annotations

import asyncio
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from core.messages import ToolCall
from tests.bots.platforms.slack.surface_script import (
    CHANNEL,
    Reply,
    context_texts,
    finished,
    has_feedback,
    has_stop,
    make_surface,
    markdown_of,
    started,
    tool_end,
    tool_start,
)
from tests.fakes.slack_server import FakeSlack


def progress_of(fake: FakeSlack, thread_ts: str) -> dict[str, Any] | None:
    """The in-progress message as the thread shows it now (the one with the Stop button)."""
    return next((m for m in fake.bot_replies(CHANNEL, thread_ts) if has_stop(m)), None)


def progress_shows(fake: FakeSlack, thread_ts: str, *, status: str, text: str = "") -> bool:
    message = progress_of(fake, thread_ts)
    return (
        message is not None
        and context_texts(message) == [status]
        and markdown_of(message).strip() == text
    )


def narrating_reply(text: str, call_id: str, tool: str) -> Reply:
    """A reply that wrote `text`, then called `tool`: its text narrates the tool activity."""
    reply = Reply()
    reply.text(text)
    reply.partial.content.append(ToolCall(id=call_id, name=tool, arguments={}))
    return reply


async def test_the_in_progress_message_says_what_is_running_then_that_the_answer_is_written(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """Without native streaming the in-progress message shows everything as it happens: the
    running tool (by its label, else its name), the narration, then the answer below it."""
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    thread = question["ts"]
    await surface.emit(started())
    looking = narrating_reply("Let me look.", "t1", "grep")
    await surface.emit(looking.end())
    await surface.emit(tool_start("t1", "grep", "Search for TODO", pattern="TODO"))
    await fake_slack.wait_for(
        lambda f: progress_shows(f, thread, status="Running Search for TODO…", text="Let me look.")
    )
    await surface.emit(tool_start("t2", "read", "", path="a.py"))  # a tool without a label
    await fake_slack.wait_for(
        lambda f: progress_shows(f, thread, status="Running read…", text="Let me look.")
    )
    message = progress_of(fake_slack, thread)
    assert message is not None
    assert [a["title"] for a in message["attachments"]] == ["Search for TODO", "read"]
    await surface.emit(tool_end("t1", "grep", "a.py:1: TODO"))
    await surface.emit(tool_end("t2", "read", "print()"))
    await fake_slack.wait_for(
        lambda f: progress_shows(f, thread, status="Working…", text="Let me look.")
    )
    answering = Reply()
    await surface.emit(answering.text("Found one TODO."))
    await fake_slack.wait_for(
        lambda f: progress_shows(
            f, thread, status="Writing…", text="Let me look.\n\nFound one TODO."
        )
    )
    await surface.emit(answering.end())
    await surface.emit(finished("Found one TODO."))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, thread)
    assert not any(has_stop(m) for m in replies)
    assert [markdown_of(m) for m in replies][-1] == "Found one TODO."


async def test_beside_a_native_stream_the_in_progress_message_never_shows_the_answer(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    thread = question["ts"]
    await surface.emit(started())
    looking = narrating_reply("Let me look.", "t1", "grep")
    await surface.emit(looking.end())
    await surface.emit(tool_start("t1", "grep", "Search for TODO", pattern="TODO"))
    await fake_slack.wait_for(lambda f: progress_of(f, thread) is not None)
    await surface.emit(tool_end("t1", "grep", "a.py:1: TODO"))
    answering = Reply()
    await surface.emit(answering.text("Found one TODO."))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(answering.end())
    await surface.emit(finished("Found one TODO."))
    await surface.close()

    [activity, answer] = fake_slack.bot_replies(CHANNEL, thread)
    assert answer["text"] == "Found one TODO." and has_feedback(answer)
    # Every write of the in-progress message showed the narration alone: the answer streams
    # in its own message below, never twice on screen.
    writes = [
        call.args
        for call in fake_slack.calls
        if call.method in ("chat.postMessage", "chat.update")
        and call.args.get("ts", activity["ts"]) == activity["ts"]
    ]
    assert writes and not any("Found one TODO" in str(args) for args in writes)
    assert markdown_of(activity).strip() == "Let me look."


async def test_the_stop_button_is_not_held_back_for_a_stream_that_could_not_start(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """Holding the Stop button back one more activity delay is for an answer that shows as it
    is written; one whose stream Slack refused for now (a 429) shows nothing yet, so the Stop
    button goes up as soon as Slack allows writes again."""
    surface, question = make_surface(slack_client, fake_slack, streaming=True, working_delay_s=3600)
    thread = question["ts"]
    await surface.emit(started())
    fake_slack.fail_next("chat.startStream", 429, retry_after=1)
    reply = Reply()
    await surface.emit(reply.text("Slow start"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream")))
    while surface._stream.starting:  # noqa: ASYNC110 (until the surface has read the 429)
        await asyncio.sleep(0.01)
    surface._activity()  # what the activity delay's timer runs (no waiting on a clock)
    await fake_slack.wait_for(lambda f: progress_of(f, thread) is not None, limit_s=10)
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.end())
    await surface.emit(finished("Slow start"))
    await surface.close()
    [answer] = fake_slack.bot_replies(CHANNEL, thread)
    assert answer["text"] == "Slow start" and has_feedback(answer)
    assert len(fake_slack.deleted) == 1 and has_stop(fake_slack.deleted[0])


async def test_a_stream_that_turned_out_to_narrate_becomes_the_in_progress_message(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """The reply streamed its words, then called a tool: the stream showed narration, not the
    answer, so its message becomes the in-progress message at once (the words and the Stop
    button), and at the end the tool activity, with nothing posted beside it."""
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    thread = question["ts"]
    await surface.emit(started())
    looking = Reply()
    await surface.emit(looking.text("Let me look at the logs."))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    while surface.ref["stream_ts"] is None:  # noqa: ASYNC110 (the surface reads the answer)
        await asyncio.sleep(0.01)
    looking.partial.content.append(ToolCall(id="t1", name="read", arguments={}))
    await surface.emit(looking.end())
    await fake_slack.wait_for(
        lambda f: progress_shows(f, thread, status="Working…", text="Let me look at the logs.")
    )
    await surface.emit(tool_start("t1", "read", "Read deploy.log", path="deploy.log"))
    await surface.emit(finished("", "aborted", error_text="Stopped by Alice."))
    await surface.close()

    [message] = fake_slack.bot_replies(CHANNEL, thread)
    assert markdown_of(message).strip() == "Let me look at the logs."
    assert [a["title"] for a in message["attachments"]] == ["Read deploy.log"]
    assert any("Stopped by Alice." in text for text in context_texts(message))
    assert not has_stop(message) and not has_feedback(message)
    assert message.get("streaming") != "in_progress"
