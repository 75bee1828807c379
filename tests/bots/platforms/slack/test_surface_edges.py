"""The Slack surface's harder cases: the in-progress message beside a stream, call counts,
transport errors, a reply the model rewrote, many tool calls, refused notices; and the pure
Block Kit helpers."""

from __future__ import annotations

import asyncio
import functools

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack import blocks
from bots.platforms.slack.surface import (
    DONE_REACTION,
    INTERRUPTED_REACTION,
    SlackFeatures,
    SlackSurface,
    SlackSurfaces,
    SurfaceOptions,
)
from bots.surface.contract import Notice
from bots.surface.feed import SurfaceFeed
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

WRITES = (
    "chat.postMessage",
    "chat.update",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
)


def message_writes(fake: FakeSlack) -> int:
    return sum(len(fake.calls_to(method)) for method in WRITES)


def stream_writes_reach(count: int, fake: FakeSlack) -> bool:
    return len(fake.calls_to("chat.startStream") + fake.calls_to("chat.appendStream")) >= count


async def test_a_quick_answer_takes_at_most_three_calls_and_no_eyes(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    for streaming in (False, True):
        surface, question = make_surface(
            slack_client, fake_slack, streaming=streaming, status_line=True, working_delay_s=3600
        )
        fake_slack.calls.clear()
        await surface.emit(started())
        reply = Reply()
        await surface.emit(reply.thinking("hmm"))
        await surface.emit(reply.text("Hi Alice, "))
        await surface.emit(reply.text("here you are."))
        await surface.emit(reply.end())
        await surface.emit(finished("Hi Alice, here you are."))
        await surface.close()
        methods = [call.method for call in fake_slack.calls]
        probe = 0 if streaming else 1  # the refused startStream, once per app
        assert len(methods) - probe <= 3, methods  # its message writes and ✅, nothing else
        assert "reactions.remove" not in methods
        assert "assistant.threads.setStatus" not in methods
        assert fake_slack.calls_to("reactions.add")[0].args["name"] == DONE_REACTION
        assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
        [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
        assert markdown_of(answer) == "Hi Alice, here you are."


async def test_a_slow_answer_shows_eyes_then_done_within_three_calls_plus_one_per_interval(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # Nothing is visible when the working delay passes (0 here: at once), so 👀 goes on; then
    # the text streams, at most one write per update interval (a second in production).
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    fake_slack.calls.clear()
    await surface.emit(started())
    assert fake_slack.reactions(CHANNEL, question["ts"]) == ["eyes"]
    reply = Reply()
    chunks = ["One. ", "Two. ", "Three. ", "Four."]
    for count, chunk in enumerate(chunks, start=1):
        await surface.emit(reply.text(chunk))
        await fake_slack.wait_for(functools.partial(stream_writes_reach, count))
    await surface.emit(reply.end())
    await surface.emit(finished("One. Two. Three. Four."))
    await surface.close()
    methods = [call.method for call in fake_slack.calls]
    assert methods == [
        "reactions.add",
        "chat.startStream",
        *["chat.appendStream"] * (len(chunks) - 1),
        "chat.stopStream",
        "reactions.remove",
        "reactions.add",
    ]
    # The run lasted the working delay (1 s in production) + one interval per append, and
    # ended within the next one: 3 + 1 per (started) interval.
    intervals = 1 + (len(chunks) - 1) + 1
    assert len(methods) <= 3 + intervals
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["text"] == "One. Two. Three. Four."


async def test_eyes_are_skipped_when_the_answer_is_already_visible(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, _question = make_surface(
        slack_client, fake_slack, streaming=True, working_delay_s=3600
    )
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Already here"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    while surface.ref["stream_ts"] is None:  # noqa: ASYNC110 (the surface reads the answer)
        await asyncio.sleep(0.01)
    await surface._show_working()  # what the working delay's timer runs (no waiting on a clock)
    await surface.emit(reply.end())
    await surface.emit(finished("Already here"))
    await surface.close()
    assert "reactions.remove" not in [call.method for call in fake_slack.calls]
    assert [c.args["name"] for c in fake_slack.calls_to("reactions.add")] == [DONE_REACTION]


async def test_no_eyes_while_a_stream_shows_text_the_retried_reply_has_not_written_yet(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # The provider retried the reply: the new one has written nothing visible yet, but the
    # stream still shows the first attempt's words, so the run does not look unseen.
    surface, question = make_surface(slack_client, fake_slack, streaming=True, working_delay_s=3600)
    reply = Reply()
    await start_streaming(surface, fake_slack, reply)
    retried = Reply()
    await surface.emit(retried.text("\n"))
    await surface._show_working()  # what the working delay's timer runs (no waiting on a clock)
    await surface.emit(retried.text("The real answer."))
    await surface.emit(retried.end())
    await surface.emit(finished("The real answer."))
    await surface.close()
    assert [c.args["name"] for c in fake_slack.calls_to("reactions.add")] == [DONE_REACTION]
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(answer).strip() == "The real answer."


async def test_eyes_in_flight_when_the_answer_ends_are_still_taken_away(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(
        slack_client, fake_slack, streaming=False, working_delay_s=0.01
    )
    fake_slack.delay("reactions.add", 0.2)  # 👀 is still on its way when the run ends
    await surface.emit(started())
    await fake_slack.wait_for(lambda f: bool(f.calls_to("reactions.add")))
    fake_slack.delay("reactions.add", 0)
    await surface.emit(finished("Done quickly."))
    await surface.close()
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(answer) == "Done quickly."


async def test_beside_a_stream_the_stop_message_goes_away_when_no_tool_ran(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    question = fake_slack.seed_message(CHANNEL, "<@UBOT> q", user=ALICE.id)
    surface = SlackSurface(
        slack_client,
        team_id=fake_slack.team_id,
        channel=CHANNEL,
        thread_ts=question["ts"],
        message_ts=question["ts"],
        user_id=ALICE.id,
        features=SlackFeatures(streaming=True),
        options=SurfaceOptions(update_interval_s=0.02, activity_delay_s=0.0),
    )
    await surface.emit(started())
    await fake_slack.wait_for(
        lambda f: any(has_stop(m) for m in f.bot_replies(CHANNEL, question["ts"]))
    )  # a slow answer gets its Stop button before any text
    reply = Reply()
    await surface.emit(reply.text("Slow but sure."))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.end())
    await surface.emit(finished("Slow but sure."))
    await surface.close()
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["text"] == "Slow but sure." and has_feedback(answer)
    assert len(fake_slack.deleted) == 1 and has_stop(fake_slack.deleted[0])
    assert surface.ref["progress_ts"] is None


async def test_a_dropped_final_update_is_repeated_safely(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("draft"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    await surface.emit(reply.end())
    fake_slack.drop_next("chat.update")  # carried out, answer lost: chat.update is idempotent
    await surface.emit(finished("draft"))
    await surface.close()
    [message] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(message) == "draft" and has_feedback(message) and not has_stop(message)
    assert len(fake_slack.calls_to("chat.postMessage")) == 1


async def test_a_dropped_stream_start_is_never_repeated(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    fake_slack.drop_next("chat.startStream")
    reply = Reply()
    await surface.emit(reply.text("Hello"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream")))
    await surface.emit(reply.text(" world"))
    await surface.emit(reply.end())
    await surface.emit(finished("Hello world"))
    await surface.close()
    assert len(fake_slack.calls_to("chat.startStream")) == 1
    # The stream that did start was found and now shows the answer: once, nothing stale.
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [markdown_of(m) for m in replies] == ["Hello world"]
    assert has_feedback(replies[0])


async def test_a_reply_the_model_rewrote_replaces_what_was_streamed(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    first = Reply()
    await surface.emit(first.text("An answer that was cut off by a retr"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    retried = Reply()  # the provider retried: the reply starts again, differently
    await surface.emit(retried.text("The real answer."))
    await surface.emit(retried.end())
    await surface.emit(finished("The real answer."))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert [markdown_of(m) for m in replies] == ["The real answer."]
    assert has_feedback(replies[0])
    assert replies[0]["streaming"] == "completed"


async def test_many_tool_calls_fold_the_oldest(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    for n in range(25):
        await surface.emit(tool_start(f"t{n}", "read", f"Read file{n}.txt", path=f"file{n}.txt"))
        await surface.emit(tool_end(f"t{n}", "read", "x" * 5_000, error=n == 3))
    await surface.emit(finished("Read them all."))
    await surface.close()
    [message, answer] = fake_slack.bot_replies(CHANNEL, question["ts"])  # activity, then answer
    assert markdown_of(answer) == "Read them all." and "attachments" not in answer
    attachments = message["attachments"]
    assert len(attachments) == blocks.MAX_TOOL_ATTACHMENTS
    assert attachments[0]["title"] == "6 earlier tool calls"
    assert attachments[0]["color"] == blocks.RED  # one of them failed
    assert attachments[-1]["title"] == "Read file24.txt"
    assert all(len(a["text"]) < 4_000 for a in attachments)  # output cut, Slack folds the rest


async def test_a_refused_ephemeral_notice_is_addressed_in_the_thread(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    fake_slack.fail_next("chat.postEphemeral", 500, error="user_not_in_channel")
    await surface.emit(Notice("Only for you.", "warning", audience=ALICE))
    await surface.close()
    [message] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert message["text"].startswith(f"<@{ALICE.id}> ⚠️ Only for you.")


async def test_a_surface_closed_without_an_ending_still_loses_its_stop_button(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    await surface.emit(tool_start("t1", "grep", "Search", pattern="x"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    await surface.close()
    [message] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert not has_stop(message)
    assert context_texts(message)[-1] == "❌ This answer ended unexpectedly."
    assert markdown_of(message) == ""  # no answer made up: the tool activity and the error
    assert fake_slack.reactions(CHANNEL, question["ts"]) == ["x"]


# -- pure helpers ------------------------------------------------------------------------------


def test_button_values_round_trip_and_refuse_garbage() -> None:
    assert blocks.parse_stop_value(blocks.stop_value(12)) == 12
    assert blocks.parse_feedback_value(blocks.feedback_value(12, "down")) == (12, "down")
    for bad in (None, "", "x", "-1", "1" * 30, 5, "up:", "maybe:3", "up:3:4"):
        assert blocks.parse_stop_value(bad) is None
        assert blocks.parse_feedback_value(bad) is None


def test_tool_attachment_escapes_and_keeps_its_fence() -> None:
    view = blocks.ToolView("c", "bash", "Run <script> & ```break```", {"cmd": "echo ```"})
    view.ok, view.output, view.duration_s = True, "a < b && c > d\n```\nnot a fence end", 2.0
    attachment = blocks.tool_attachment(view)
    assert "&lt;" in attachment["text"] and "&amp;&amp;" in attachment["text"]
    assert attachment["text"].count("```") == 4  # two fences, the output's own ``` defused
    assert attachment["footer"] == "bash · 2.0s"


def test_progress_tail_of_a_long_answer_is_balanced_and_fits() -> None:
    text = "```\n" + "\n".join(f"line {i}" for i in range(3_000)) + "\n```"
    tail = blocks.progress_tail(text)
    assert len(tail) <= blocks.MARKDOWN_LIMIT
    assert fences_balanced(tail)
    assert tail.rstrip().endswith("line 2999\n```")
    assert tail.startswith("```\n")  # the fence opened long before is reopened
    prose = "intro\n\n" + "\n\n".join(f"para {i} " + "x" * 80 for i in range(500))
    assert blocks.progress_tail(prose).startswith("para ")  # no fence invented


async def test_after_a_refused_update_the_latest_state_shows_once_retry_after_passed(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("one"))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    fake_slack.fail_next("chat.update", 429, retry_after=1)
    await surface.emit(reply.text(" two"))
    await fake_slack.wait_for(lambda f: len(f.calls_to("chat.update")) == 1)
    await surface.emit(reply.text(" three"))  # asked for while quiet: not sent yet
    await fake_slack.wait_for(
        lambda f: markdown_of(f.bot_replies(CHANNEL, question["ts"])[0]) == "one two three"
    )
    assert [c.status for c in fake_slack.calls_to("chat.update")] == [429, 200]
    await surface.emit(reply.end())
    await surface.emit(finished("one two three"))
    await surface.close()


async def test_a_stream_that_cannot_be_replaced_gives_way_to_posted_parts(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    answer = "\n\n".join(f"Paragraph {n}. " + "text " * 100 for n in range(60))  # > 30k
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text(answer[:5_000]))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.text(answer[5_000:]))
    await surface.emit(reply.end())
    fake_slack.fail_next("chat.update", 500)
    await surface.emit(finished(answer))
    await surface.close()
    replies = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert not any("streaming" in m for m in replies)  # the half-streamed answer went
    shown = "\n\n".join(markdown_of(m) for m in replies)
    assert shown.split() == answer.split()
    assert has_feedback(replies[-1])


async def test_in_a_dm_the_stream_needs_no_recipient(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True, channel="D0DM")
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Hello in private."))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.end())
    await surface.emit(finished("Hello in private."))
    await surface.close()
    start = fake_slack.calls_to("chat.startStream")[0].args
    assert "recipient_user_id" not in start and start["channel"] == "D0DM"
    [answer] = fake_slack.bot_replies("D0DM", question["ts"])
    assert answer["text"] == "Hello in private." and has_feedback(answer)


async def test_nothing_quoted_or_answered_can_ping_the_channel(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=False)
    await surface.emit(Notice("I won't answer '<!channel> hi'.", audience=ALICE))
    fake_slack.fail_next("chat.postEphemeral", 500, error="user_not_in_channel")
    await surface.emit(Notice("Dropped '<!here> <@UBOB>'.", audience=ALICE))
    await surface.emit(started())
    await surface.emit(finished("Sure <!everyone>, see <https://x.example|this>."))
    await surface.close()
    sent = [fake_slack.ephemerals[0]["text"]] + [
        text
        for m in fake_slack.bot_replies(CHANNEL, question["ts"])
        for text in [
            m["text"],
            *(e["text"] for b in m["blocks"] if b["type"] == "context" for e in b["elements"]),
        ]
    ]
    assert sent and not any(
        token in text
        for text in sent
        for token in ("<!channel>", "<!here>", "<!everyone>", "<@UBOB>")
    )
    addressed = fake_slack.bot_replies(CHANNEL, question["ts"])[0]
    assert addressed["blocks"][0]["elements"][0]["text"].startswith(f"<@{ALICE.id}> ")
    answer = markdown_of(fake_slack.bot_replies(CHANNEL, question["ts"])[-1])
    assert "<!everyone>" not in answer and "everyone" in answer  # shown, not sent
    assert "<https://x.example|this>" in answer  # links are left alone


async def test_a_streamed_answer_cannot_broadcast_either(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, streaming=True)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Attention <!here> and <!subteam^S1|@devs>: "))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    await surface.emit(reply.text("<!channel> done"))
    await surface.emit(reply.end())
    await surface.emit(finished("Attention <!here> and <!subteam^S1|@devs>: <!channel> done"))
    await surface.close()
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["streaming"] == "completed" and "done" in answer["text"]
    streamed = str([c.args for c in fake_slack.calls if c.method.startswith("chat.")])
    assert (
        "<!here>" not in streamed and "<!channel>" not in streamed and "<!subteam" not in streamed
    )


def test_a_ref_round_trips_and_foreign_or_broken_refs_give_no_surface(
    slack_client: AsyncWebClient,
) -> None:
    ref = {
        "platform": "slack",
        "team": "T1",
        "channel": "C1",
        "thread_ts": "1.000001",
        "message_ts": "1.000001",
        "user": "U1",
        "progress_ts": "2.000002",
        "stream_ts": "3.000003",
    }
    surface = SlackSurface.from_ref(slack_client, ref)
    assert surface is not None and surface.ref == ref
    # A run that showed nothing yet (or a ref from before a field existed): blanks are none.
    sparse = {"platform": "slack", "channel": "C1", "thread_ts": "1.000001", "message_ts": ""}
    surface = SlackSurface.from_ref(slack_client, sparse)
    assert surface is not None
    assert surface.ref == {
        **sparse,
        "team": "",
        "message_ts": None,
        "user": None,
        "progress_ts": None,
        "stream_ts": None,
    }
    for broken in ({}, {"platform": "terminal"}, {**ref, "channel": 5}, {**ref, "thread_ts": None}):
        assert SlackSurface.from_ref(slack_client, broken) is None


async def test_no_eyes_once_the_answer_has_text_even_before_it_is_posted(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, working_delay_s=3600)
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("On its way"))
    await surface._show_working()  # the working delay passes before the first flush ran
    await surface.emit(reply.end())
    await surface.emit(finished("On its way"))
    await surface.close()
    assert [c.args["name"] for c in fake_slack.calls_to("reactions.add")] == [DONE_REACTION]
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]


async def start_streaming(surface: SlackSurface, fake: FakeSlack, reply: Reply) -> None:
    await surface.emit(started())
    await surface.emit(reply.text("Streaming along"))
    await fake.wait_for(lambda f: bool(f.calls_to("chat.startStream", ok_only=True)))
    while surface.ref["stream_ts"] is None:  # noqa: ASYNC110 (the surface reads the answer)
        await asyncio.sleep(0.01)


async def test_a_stream_ending_within_one_more_activity_delay_posts_no_stop_message(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, working_delay_s=3600)
    reply = Reply()
    await start_streaming(surface, fake_slack, reply)
    surface._activity()  # the activity delay passes while the text shows: deferred once
    await surface.emit(reply.text(", done"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.appendStream")))
    await surface.emit(reply.end())
    await surface.emit(finished("Streaming along, done"))
    await surface.close()
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["text"] == "Streaming along, done"
    assert not fake_slack.calls_to("chat.postMessage") and not fake_slack.deleted


async def test_a_stream_still_going_after_two_activity_delays_gets_its_stop_button(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, question = make_surface(slack_client, fake_slack, working_delay_s=3600)
    reply = Reply()
    await start_streaming(surface, fake_slack, reply)
    surface._activity()
    surface._activity()  # still going a delay later: now the Stop button shows
    await fake_slack.wait_for(
        lambda f: any(has_stop(m) for m in f.bot_replies(CHANNEL, question["ts"]))
    )
    await surface.emit(reply.text(", still going"))
    await surface.emit(reply.end())
    await surface.emit(finished("Streaming along, still going"))
    await surface.close()
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["text"] == "Streaming along, still going"
    assert len(fake_slack.deleted) == 1 and has_stop(fake_slack.deleted[0])


async def test_an_answer_already_posted_is_not_posted_again_by_recovery(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # A run's answer posted, then its process died (or lost its lease) before the run was
    # closed: whoever recovers it shows that answer where it is, not a second time.
    surface, question = make_surface(
        slack_client, fake_slack, streaming=False, working_delay_s=3600
    )
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("The answer."))
    await surface.emit(reply.end())
    await surface.emit(finished("The answer."))
    await surface.close()
    [posted] = fake_slack.bot_replies(CHANNEL, question["ts"])

    recovered = SlackSurface.from_ref(slack_client, surface.ref)
    assert recovered is not None
    await recovered.emit(finished("The answer."))
    await recovered.close()
    [shown] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert shown["ts"] == posted["ts"] and markdown_of(shown) == "The answer."
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]


async def test_the_stream_is_recorded_with_the_run_before_its_end_is_shown(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # The stream was started by a throttled update between two events, so the feed had not
    # seen its ts yet; killed right after the end was shown, the run's stored ref must name
    # the stream, or whoever recovers the run posts the answer a second time beside it.
    surface, _ = make_surface(slack_client, fake_slack, streaming=True, working_delay_s=3600)
    recorded: list[tuple[dict[str, object], int]] = []  # (ref, Slack calls made by then)

    async def on_ref_change(_run_id: int, ref: dict[str, object]) -> None:
        recorded.append((ref, len(fake_slack.calls)))

    feed = SurfaceFeed(surface, on_ref_change=on_ref_change, run_id=RUN_ID)
    feed.put(started())
    reply = Reply()
    feed.put(reply.text("The answer."))
    await fake_slack.wait_for(lambda fake: bool(fake.calls_to("chat.startStream")), limit_s=10)
    feed.put(reply.end())
    feed.put(finished("The answer."))
    feed.close()
    await asyncio.wait_for(feed.wait(), 10)
    assert len(fake_slack.calls_to("chat.startStream")) == 1
    methods = [c.method for c in fake_slack.calls]
    shown_at = methods.index("chat.stopStream")  # the end: from here on it is visible
    assert any(ref.get("stream_ts") for ref, calls in recorded if calls <= shown_at), (
        recorded,
        methods,
    )


async def test_a_recovered_run_takes_away_the_earlier_eyes_and_shows_no_usage_or_votes(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # The process that ran the answer put 👀 on Alice's message and died; whoever recovers
    # the run (knowing nothing of its usage) says where it stopped, with ⚠️ instead of 👀.
    question = fake_slack.seed_message(CHANNEL, "<@UBOT> question", user=ALICE.id)
    await slack_client.reactions_add(channel=CHANNEL, timestamp=question["ts"], name="eyes")
    ref = {"platform": "slack", "team": fake_slack.team_id, "channel": CHANNEL}
    ref |= {"thread_ts": question["ts"], "message_ts": question["ts"], "user": ALICE.id}
    surfaces = SlackSurfaces(slack_client, options=SurfaceOptions(usage_footer=True))
    recovered = surfaces.for_ref("slack:T0TEAM:C0CHAN:1", ref)
    assert recovered is not None
    await recovered.emit(finished("Half an answ", "interrupted", error_text="Interrupted."))
    await recovered.close()
    [message] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(message) == "Half an answ"
    assert not has_feedback(message)  # an interrupted answer is not one to vote on
    assert not any("tokens" in text for text in context_texts(message))
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [INTERRUPTED_REACTION]


async def test_the_answer_streams_to_the_runs_author_when_the_surface_was_made_for_nobody(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # A surface made before its author was known (a scheduled run's thread, say): Slack needs
    # a recipient to stream in a channel, and the run's author is the one.
    question = fake_slack.seed_message(CHANNEL, "<@UBOT> question", user=ALICE.id)
    surface = SlackSurface(
        slack_client,
        team_id=fake_slack.team_id,
        channel=CHANNEL,
        thread_ts=question["ts"],
        features=SlackFeatures(streaming=True),
        options=SurfaceOptions(update_interval_s=0.02, activity_delay_s=3600),
    )
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Streaming along"))
    await fake_slack.wait_for(lambda f: bool(f.calls_to("chat.startStream")))
    await surface.emit(reply.end())
    await surface.emit(finished("Streaming along"))
    await surface.close()
    assert fake_slack.calls_to("chat.startStream")[0].args["recipient_user_id"] == ALICE.id
    assert surface.ref["user"] == ALICE.id
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert answer["text"] == "Streaming along" and has_feedback(answer)


async def test_an_answer_within_the_default_working_delay_shows_no_eyes(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # About a second (the default): an answer that ends sooner costs its message and ✅ only.
    surface, question = make_surface(slack_client, fake_slack, working_delay_s=1.0)
    await surface.emit(started())
    await surface.emit(finished("Yes."))
    await surface.close()
    assert [c.args["name"] for c in fake_slack.calls_to("reactions.add")] == [DONE_REACTION]
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(answer) == "Yes." and has_feedback(answer)


async def test_a_run_shown_from_a_stored_ref_updates_one_message_and_never_streams(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    # A message another instance accepted (or a run resumed after a restart) is shown through
    # a surface made from its stored ref; such a surface cannot finish a stream it started,
    # so its answer is written into one message by updates, as in a workspace without streams.
    question = fake_slack.seed_message(CHANNEL, "<@UBOT> question", user=ALICE.id)
    ref = {"platform": "slack", "team": fake_slack.team_id, "channel": CHANNEL}
    ref |= {"thread_ts": question["ts"], "message_ts": question["ts"], "user": ALICE.id}
    options = SurfaceOptions(update_interval_s=0.02, activity_delay_s=3600, working_delay_s=3600)
    surface = SlackSurface.from_ref(slack_client, ref, options=options)
    assert surface is not None
    await surface.emit(started())
    reply = Reply()
    await surface.emit(reply.text("Picked up where it was left."))
    await fake_slack.wait_for(lambda f: len(f.bot_replies(CHANNEL, question["ts"])) == 1)
    await surface.emit(reply.end())
    await surface.emit(finished("Picked up where it was left."))
    await surface.close()
    assert not fake_slack.calls_to("chat.startStream")
    [answer] = fake_slack.bot_replies(CHANNEL, question["ts"])
    assert markdown_of(answer) == "Picked up where it was left." and has_feedback(answer)
    assert fake_slack.reactions(CHANNEL, question["ts"]) == [DONE_REACTION]
