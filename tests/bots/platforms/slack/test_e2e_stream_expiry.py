"""Issue 24: Slack ends a native stream after about five minutes (`message_not_in_streaming_state`).
The real bolt app and runner against a FakeSlack that ends streams after about a second: an
answer still being written then keeps showing, and the thread ends with the whole answer
once, its end shown (👍/👎, no Stop, ✅) and nothing left streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.models.scripted import Reply
from tests.bots.platforms.slack.e2e_harness import message_event, running, texts
from tests.bots.platforms.slack.held_model import HeldModel
from tests.bots.platforms.slack.surface_script import has_feedback, has_stop, markdown_of
from tests.fakes.slack_server import FakeSlack

FIRST = "The deploy failed at step three, where the migration timed out. "
SECOND = (
    "It held a lock on the users table while the old release still served traffic, "
    "so every login waited on it. Run the migration before the release next time."
)
STREAM_AGE_S = 1.0  # Slack's is about 300 s


def streaming(fake: FakeSlack, thread_ts: str) -> list[dict[str, Any]]:
    return [m for m in fake.bot_replies("C1", thread_ts) if m.get("streaming") == "in_progress"]


async def test_an_answer_outliving_its_stream_keeps_showing_and_ends_whole_and_once(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.stream_max_age_s = STREAM_AGE_S
    model = HeldModel([Reply(text=FIRST + SECOND, chunk_size=len(FIRST))])
    rest_written = model.hold_after_text(0, len(FIRST))
    ended = model.hold_before_end(0)
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "why did the deploy fail?")
        assert await app.event(event) == 200
        await fake_slack.wait_for(lambda f: bool(streaming(f, event["ts"])), 10)
        [stream] = streaming(fake_slack, event["ts"])
        await fake_slack.stream_expired("C1", stream["ts"])
        rest_written.set()
        # The rest shows while the answer is still being written, though Slack ended the stream.
        await fake_slack.wait_for(
            lambda f: SECOND.strip() in texts(f.bot_replies("C1", event["ts"])), 10
        )
        ended.set()
        await app.settle()

    replies = app.replies("C1", event["ts"])
    shown = [m for m in replies if markdown_of(m).strip()]
    words = " ".join(markdown_of(m) for m in shown).split()
    assert words == (FIRST + SECOND).split(), "the whole answer, once, in order"
    assert has_feedback(shown[-1])
    assert not any(has_stop(m) for m in replies)
    assert not streaming(fake_slack, event["ts"])
    assert "white_check_mark" in fake_slack.reactions("C1", event["ts"])


@pytest.mark.parametrize("with_rest", [True, False], ids=["rest-at-the-end", "nothing-left"])
async def test_an_answer_whose_stream_ended_before_the_run_is_finished_in_place(
    fake_slack: FakeSlack, tmp_path: Path, with_rest: bool
) -> None:
    """Slack ended the stream while the run wrote nothing (a slow end): the end still shows,
    in the same message, with the rest of the answer if there was one."""
    fake_slack.stream_max_age_s = STREAM_AGE_S
    first = FIRST if with_rest else FIRST + SECOND
    model = HeldModel([Reply(text=FIRST + SECOND, chunk_size=len(first))])
    rest_written = model.hold_after_text(0, len(first))
    ended = model.hold_before_end(0)
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "why did the deploy fail?")
        await app.event(event)
        await fake_slack.wait_for(lambda f: bool(streaming(f, event["ts"])), 10)
        [stream] = streaming(fake_slack, event["ts"])
        await fake_slack.stream_expired("C1", stream["ts"])
        rest_written.set()
        ended.set()
        await app.settle()

    replies = app.replies("C1", event["ts"])
    shown = [m for m in replies if markdown_of(m).strip()]
    assert [m["ts"] for m in shown] == [stream["ts"]], "finished where it streamed"
    assert markdown_of(shown[0]).split() == (FIRST + SECOND).split()
    assert has_feedback(shown[0])
    assert not any(has_stop(m) for m in replies)
    assert not streaming(fake_slack, event["ts"])
