"""The Slack surface against the fake Slack, through the real slack_sdk client: what a thread
finally shows, and which calls it took to get there."""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack.blocks import GREEN, RED, parse_feedback_value, parse_stop_value
from bots.platforms.slack.surface import (
    DONE_REACTION,
    FAILED_REACTION,
    STOPPED_REACTION,
    WORKING_REACTION,
)
from bots.surface.contract import FileOut, Notice
from core.messages import ToolCall
from tests.bots.platforms.slack.surface_script import (
    ALICE,
    CHANNEL,
    RUN_ID,
    Reply,
    context_texts,
    fences_balanced,
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

ANSWER = "Here is **the answer**.\n\n- one\n- two"


async def test_fallback_streams_into_one_message_then_shows_the_final_answer(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    assert fake_slack.reactions(CHANNEL, question["ts"]) == ["eyes"]  # at once
    reply = Reply()
    await surface.emit(reply.start())
    for word in ANSWER.split(" "):
        await surface.emit(reply.text(word + " "))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    progress = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
    assert has_stop(progress)  # the in-progress message has a Stop button
    await surface.emit(reply.end())
    await surface.emit(finished(ANSWER))
    await surface.close()

    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert len(replies) == 1  # the in-progress message became the answer
    final = replies[0]
    assert markdown_of(final).strip() == ANSWER
    assert not has_stop(final)
    assert has_feedback(final)
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
    assert len(fake_slack.calls_to("chat.startStream")) == 1  # tried once, then fell back
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert surface.ref["progress_ts"] == final["ts"]
    assert surface.ref["thread_ts"] == question["ts"]


async def test_native_stream_with_recipient_and_feedback_on_stop(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    reply = Reply()
    for chunk in ("Here is ", "**the answer**.", "\n\n- one\n- two"):
        await surface.emit(reply.text(chunk))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.end())
    await surface.emit(finished(ANSWER))
    await surface.close()

    start = fake_slack.calls_to("chat.startStream")[0].args
    assert start["recipient_user_id"] == ALICE.id
    assert start["recipient_team_id"] == fake_slack.team_id
    assert start["thread_ts"] == question["ts"]
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert len(replies) == 1
    assert replies[0]["text"] == ANSWER
    assert replies[0]["streaming"] == "completed"
    assert has_feedback(replies[0])
    assert not fake_slack.calls_to("chat.postMessage")  # no tools: nothing else posted
    assert not fake_slack.calls_to("chat.update")
    assert surface.ref["stream_ts"] == replies[0]["ts"]
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]


async def test_a_429_on_the_update_still_delivers_the_answer_exactly_once(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    sleeps: list[float] = []
    surface, question = make_surface(slack_client, fake_slack, streaming=False, sleeps=sleeps)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Working on it"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    fake_slack.fail_next("chat.update", 429, retry_after=7, times=2)
    await surface.emit(reply.text(" — almost"))
    # The streaming update is refused: no retry of a stale update, quiet until Retry-After.
    await fake_slack.wait_for(lambda f: len(f.calls_to("chat.update")) == 1)
    await surface.emit(reply.text(" done."))
    await surface.emit(reply.end())
    await surface.emit(finished("Working on it — almost done."))
    await surface.close()

    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [markdown_of(m) for m in replies] == ["Working on it — almost done."]
    assert sleeps == [7.0]  # the final update waited out Retry-After once, then landed
    assert [c.status for c in fake_slack.calls_to("chat.update")] == [429, 429, 200]
    assert len(fake_slack.calls_to("chat.postMessage")) == 1


async def test_a_429_on_append_stream_still_delivers_the_answer_exactly_once(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    sleeps: list[float] = []
    surface, question = make_surface(slack_client, fake_slack, sleeps=sleeps)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("First half, "))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    fake_slack.fail_next("chat.appendStream", 429, retry_after=3)
    await surface.emit(reply.text("second half."))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.appendStream")))
    fake_slack.fail_next("chat.stopStream", 429, retry_after=2)
    await surface.emit(reply.end())
    await surface.emit(finished("First half, second half."))
    await surface.close()

    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [m["text"] for m in replies] == ["First half, second half."]
    assert sleeps == [2.0]  # the refused append was skipped; the stop carried its text
    assert [c.status for c in fake_slack.calls_to("chat.stopStream")] == [429, 200]


async def test_a_failed_update_falls_back_to_posting_the_answer(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("partial"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    progress_ts = fake_slack.bot_replies(CHANNEL, question["ts"])[0]["ts"]
    fake_slack.messages[CHANNEL] = [  # someone deleted the in-progress message
        m for m in fake_slack.messages[CHANNEL] if m["ts"] != progress_ts
    ]
    await surface.emit(reply.text(" and the rest"))
    await surface.emit(reply.end())
    await surface.emit(finished("partial and the rest"))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [markdown_of(m) for m in replies] == ["partial and the rest"]


async def test_a_post_lost_in_transport_is_found_not_repeated(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    fake_slack.drop_next("chat.postMessage")  # the answer is written, the reply lost
    await surface.emit(finished("Short answer."))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [markdown_of(m) for m in replies] == ["Short answer."]
    assert fake_slack.calls_to("conversations.replies")  # it looked before posting again


async def test_a_long_answer_is_split_with_fences_balanced_and_nothing_lost(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    paragraphs = []
    for n in range(40):
        paragraphs.append(f"Paragraph {n}: " + "words and more words " * 20)
        paragraphs.append(
            "```python\n" + "\n".join(f"x_{n}_{i} = {i}" for i in range(30)) + "\n```"
        )
    answer = "\n\n".join(paragraphs)
    assert len(answer) > 30_000
    for streaming in (False, True):
        surface, question = make_surface(slack_client, fake_slack, streaming=streaming)
        await surface.emit(started())
        reply = Reply()
        for start in range(0, len(answer), 4_000):
            await surface.emit(reply.text(answer[start : start + 4_000]))
        await surface.emit(reply.end())
        await surface.emit(finished(answer))
        await surface.close()

        replies = fake_slack.bot_replies(CHANNEL, question["ts"])
        shown = [markdown_of(m) for m in replies]
        assert len(shown) >= 3
        assert all(len(part) <= 12_000 for part in shown)
        assert all(fences_balanced(part) for part in shown)
        # Nothing lost at the seams: every line of the answer is shown, in order.
        shown_lines = [line for part in shown for line in part.split("\n") if line.strip()]
        answer_lines = [line for line in answer.split("\n") if line.strip()]
        assert [line for line in shown_lines if line.strip() not in ("```", "```python")] == [
            line for line in answer_lines if line.strip() not in ("```", "```python")
        ]
        assert [has_feedback(m) for m in replies] == [False] * (len(replies) - 1) + [True]
        assert not any(m.get("streaming") == "in_progress" for m in replies)


async def test_one_attachment_per_tool_call_coloured_by_outcome(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    await surface.emit(tool_start("t1", "grep", "Search for TODO in src/", pattern="TODO"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    progress = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
    assert has_stop(progress)
    assert progress["attachments"][0]["title"] == "Search for TODO in src/"
    await surface.emit(tool_end("t1", "grep", "src/a.py:1: # TODO\n" * 50, duration=0.42))
    await surface.emit(tool_start("t2", "read", "Read missing.txt", path="missing.txt"))
    await surface.emit(
        tool_end("t2", "read", "No such file: missing.txt", error=True, duration=0.01)
    )
    reply = Reply()
    await surface.emit(reply.text("Found 50 TODOs."))
    await surface.emit(reply.end())
    await surface.emit(finished("Found 50 TODOs."))
    await surface.close()

    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    activity = next(m for m in replies if m.get("attachments"))
    grep, read = activity["attachments"]
    assert (grep["color"], grep["title"]) == (GREEN, "Search for TODO in src/")
    assert (read["color"], read["title"]) == (RED, "Read missing.txt")
    assert grep["footer"] == "grep · 0.4s"
    assert "failed" in read["footer"]
    assert '"pattern": "TODO"' in grep["text"]
    assert "src/a.py:1: # TODO" in grep["text"]
    assert "No such file" in read["text"]
    assert grep["mrkdwn_in"] == ["text"]
    assert not any(has_stop(m) for m in replies)  # Stop removed once done
    # The answer shows once: streamed beside the activity, or in it when it came last.
    assert [markdown_of(m) for m in replies if markdown_of(m)] == ["Found 50 TODOs."]
    # Only the answer streams: the tool activity before it started no (empty) stream.
    starts = [c.args["markdown_text"] for c in fake_slack.calls_to("chat.startStream")]
    assert all(text == "Found 50 TODOs." for text in starts)


async def test_a_stopped_run_says_so_and_loses_its_stop_button(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    await surface.emit(tool_start("t1", "bash", "Run the tests", command="pytest"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    progress = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
    stop = next(
        element
        for block in progress["blocks"]
        for element in block.get("elements", [])
        if element.get("action_id") == "teammate_stop"
    )
    assert parse_stop_value(stop["value"]) == RUN_ID
    await surface.emit(tool_end("t1", "bash", "interrupted", error=True))
    await surface.emit(finished("", "aborted", error_text="Stopped by Alice."))
    await surface.close()

    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert len(replies) == 1
    assert not has_stop(replies[0])
    assert any("Stopped by Alice." in text for text in context_texts(replies[0]))
    assert len(replies[0]["attachments"]) == 1
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [STOPPED_REACTION]


async def test_feedback_buttons_carry_the_run_and_are_fresh_each_time(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    block_ids = []
    for run_id in (7, 8):
        surface, question = make_surface(slack_client, fake_slack, streaming=False)
        await surface.emit(started(run_id))
        await surface.emit(finished("Yes.", run_id=run_id))
        await surface.close()
        final = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
        block = next(b for b in final["blocks"] if b["type"] == "context_actions")
        element = block["elements"][0]
        assert element["type"] == "feedback_buttons"
        assert parse_feedback_value(element["positive_button"]["value"]) == (run_id, "up")
        assert parse_feedback_value(element["negative_button"]["value"]) == (run_id, "down")
        block_ids.append(block["block_id"])
    assert len(set(block_ids)) == 2


async def test_usage_footer_and_errors_with_reference(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False, usage_footer=True)
    await surface.emit(started())
    await surface.emit(
        finished("", "error", error_text="Something went wrong.", reference="ref-123")
    )
    await surface.close()
    final = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
    texts = context_texts(final)
    assert any("Something went wrong. (reference ref-123)" in t for t in texts)
    assert any("tokens in" in t and "$0.0123" in t for t in texts)
    assert not has_feedback(final)  # no answer, nothing to vote on
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [FAILED_REACTION]


async def test_notices_private_to_their_audience_else_in_the_thread(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    # A steered message's surface: only private notices, nothing else.
    await surface.emit(Notice("Got it, reading this next.", audience=ALICE))
    await surface.emit(Notice("I've read this.", audience=ALICE))
    await surface.close()
    assert [e["user"] for e in fake_slack.ephemerals] == [ALICE.id, ALICE.id]
    assert fake_slack.ephemerals[0]["thread_ts"] == question["ts"]
    assert fake_slack.bot_replies(CHANNEL, question["ts"]) == []
    assert fake_slack.reactions(CHANNEL, question["ts"]) == []

    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    await surface.emit(Notice("This conversation got long; summarising it.", "info"))
    await surface.emit(finished("ok"))
    await surface.close()
    texts = [context_texts(m) for m in fake_slack.bot_replies(CHANNEL, question["ts"])]
    assert ["ℹ️ This conversation got long; summarising it."] in texts


async def test_file_out_is_uploaded_into_the_thread(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    await surface.emit(
        FileOut(path="out/report.csv", name="report.csv", mime_type="text/csv", data=b"a,b\n")
    )
    await surface.emit(finished("Attached the report."))
    await surface.close()
    [hosted] = [f for f in fake_slack.files.values() if f.shared]
    assert (hosted.name, hosted.content) == ("report.csv", b"a,b\n")
    assert (hosted.channel, hosted.thread_ts) == (CHANNEL, question["ts"])


async def test_status_line_shows_thinking_and_tools_never_as_text(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True, status_line=True)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.thinking("let me think about secrets"))
    await fake_slack.wait_for(lambda f: bool(f.statuses))
    await surface.emit(tool_start("t1", "grep", "Search", pattern="x"))
    await fake_slack.wait_for(lambda f: any(s["status"] == "running grep…" for s in f.statuses))
    await surface.emit(tool_end("t1", "grep", "none"))
    await surface.emit(reply.text("Nothing found."))
    await surface.emit(reply.end())
    await surface.emit(finished("Nothing found."))
    await surface.close()
    statuses = [s["status"] for s in fake_slack.statuses]
    assert statuses[0] == "thinking…"
    assert "running grep…" in statuses
    assert statuses[-1] == ""  # cleared at the end
    assert all(s["thread_ts"] == question["ts"] for s in fake_slack.statuses)
    everything = str(fake_slack.messages) + str([c.args for c in fake_slack.calls])
    assert "let me think" not in everything  # thinking is status, never text


async def test_no_status_line_where_the_workspace_lacks_it(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.assistant_error = "not_allowed"
    surface, _question = make_surface(slack_client, fake_slack, streaming=False, status_line=True)
    await surface.emit(started())
    await surface.emit(tool_start("t1", "grep", "Search", pattern="x"))
    await surface.emit(tool_end("t1", "grep", "none"))
    await surface.emit(finished("done"))
    await surface.close()
    assert len(fake_slack.calls_to("assistant.threads.setStatus")) == 1  # tried once


async def test_a_steered_message_is_acknowledged_with_reactions_not_notes(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # Two private notes for every reply sent while an answer runs were noise (issue 28):
    # 👀 while it waits, ✅ once the running answer has read it; nothing else posted.
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(Notice("queued", audience=ALICE, ack="queued"))
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [WORKING_REACTION]
    await surface.emit(Notice("read", audience=ALICE, ack="read"))
    await surface.close()
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
    assert fake_slack.ephemerals == []
    assert fake_slack.bot_replies(CHANNEL, question["ts"]) == []


async def test_tool_activity_is_posted_above_an_answer_that_streams_in_the_same_flush(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """A quick tool call and the answer's first words shown by one flush (issue 28): the
    in-progress message goes up before the answer's stream starts, so it stays above it."""
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    narrating = Reply()
    narrating.partial.content.append(
        ToolCall(id="t1", name="read", arguments={"path": "deploy.log"})
    )
    await surface.emit(narrating.end())
    await surface.emit(tool_start("t1", "read", "Read deploy.log", path="deploy.log"))
    await surface.emit(tool_end("t1", "read", "disk full"))
    answering = Reply()
    await surface.emit(answering.text(ANSWER))  # (no flush yet: nothing above awaited one)
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream")))
    await surface.emit(answering.end())
    await surface.emit(finished(ANSWER))
    await surface.close()

    [activity, answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert activity["attachments"] and not has_stop(activity)
    assert markdown_of(answer).strip() == ANSWER and has_feedback(answer)
    # One stream, started by the answer's text (not by the tool activity before it).
    assert answer["streaming"] == "completed"
    assert [c.args["markdown_text"] for c in fake_slack.calls_to("chat.startStream")] == [ANSWER]


async def test_after_a_429_on_append_stream_nothing_more_is_appended_until_retry_after(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """Slack asked for 30 s of quiet: the text written meanwhile waits (no append would be
    accepted, each would cost another 429), and the end shows all of it once."""
    surface, question = make_surface(slack_client, fake_slack, sleeps=[])
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("One. "))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    fake_slack.fail_next("chat.appendStream", 429, retry_after=30)
    await surface.emit(reply.text("Two. "))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.appendStream")))
    for more in ("Three. ", "Four. ", "Five."):
        await surface.emit(reply.text(more))
        await asyncio.sleep(0.1)  # several update intervals (0.02 s) pass
    assert [c.status for c in fake_slack.calls_to("chat.appendStream")] == [429]
    await surface.emit(reply.end())
    await surface.emit(finished("One. Two. Three. Four. Five."))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [m["text"] for m in replies] == ["One. Two. Three. Four. Five."]


async def test_a_part_of_the_answer_refused_with_5xx_is_tried_again_with_backoff_once(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    """Slack answers 503 twice to the post of the answer's second part: it is posted after
    waiting 0.5 s, then 1 s (looking in the thread first each time), and shown once."""
    sleeps: list[float] = []
    surface, question = make_surface(slack_client, fake_slack, streaming=False, sleeps=sleeps)
    answer = "\n\n".join(f"Paragraph {n}: " + "word " * 150 for n in range(30))
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text(answer[:100]))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    fake_slack.fail_next("chat.postMessage", 503, times=2)
    await surface.emit(reply.text(answer[100:]))
    await surface.emit(reply.end())
    await surface.emit(finished(answer))
    await surface.close()
    assert [c.status for c in fake_slack.calls_to("chat.postMessage")][-3:] == [503, 503, 200]
    assert sleeps == [0.5, 1.0]
    shown = " ".join(
        markdown_of(m) for m in fake_slack.bot_replies(CHANNEL, question["ts"])
    ).split()
    assert shown == answer.split()
