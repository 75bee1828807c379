"""What the Slack translator tells the operator and the runner, pinned: every reason an event
gets no answer with its detail (the field or subtype an operator sees, never payload text), the
reason names themselves, DMs decided by `channel_type` first, text-less file shares, broken
file entries skipped without losing the rest, and the backfill handed to the runner."""

from __future__ import annotations

from typing import Any

import pytest

from bots.incoming import BackfillMessage
from bots.platforms.slack.events import Ignored, IgnoreReason, SlackMessage
from core.messages import Author
from tests.bots.platforms.slack.test_events import (
    BOT_ID,
    BOT_USER,
    SHARED_FILE,
    app_mention,
    channel_message,
    dm,
    envelope,
    message_of,
    parse,
)


def without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        body.pop(key)
    return body


def event_without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        body["event"].pop(key)
    return body


def assistant_thread(**thread: Any) -> dict[str, Any]:
    fields = {"user_id": "U123ABC456", "channel_id": "D123ABC456", "thread_ts": "1729999327.1"}
    fields.update(thread)
    return envelope({"type": "assistant_thread_started", "assistant_thread": fields})


@pytest.mark.parametrize(
    ("body", "reason", "detail"),
    [
        ("not an envelope", "malformed", "body"),
        (without(app_mention(), "event"), "malformed", "event"),
        (without(app_mention(), "event_id"), "malformed", "event_id"),
        (without(app_mention(), "team_id"), "malformed", "team_id"),
        (envelope({"type": "reaction_added"}), "unsupported_event", "reaction_added"),
        (envelope({"type": 7}), "unsupported_event", "type"),
        (channel_message(subtype=3), "malformed", "subtype"),
        (channel_message(subtype="bot_message"), "bot_message", "bot_message"),
        (channel_message(subtype="message_changed"), "edited", "message_changed"),
        (channel_message(subtype="message_deleted"), "deleted", "message_deleted"),
        (channel_message(subtype="channel_join"), "other_subtype", "channel_join"),
        (app_mention(bot_id=BOT_ID), "own_message", "bot_id"),
        (app_mention(bot_id="B0OTHER1"), "bot_message", "bot_id"),
        (app_mention(bot_profile={"id": "B0OTHER1"}), "bot_message", "bot_profile"),
        (event_without(app_mention(), "user"), "malformed", "user"),
        (app_mention(user=BOT_USER), "own_message", "user"),
        (event_without(app_mention(), "channel"), "malformed", "channel"),
        (app_mention(ts="yesterday"), "malformed", "ts"),
        (app_mention(thread_ts="soon"), "malformed", "thread_ts"),
        (app_mention(text=["not", "text"]), "malformed", "text"),
        (app_mention(files={"id": "F1"}), "malformed", "files"),
        (channel_message(text="<@U0SOMEONE> look"), "mentions_someone_else", ""),
        (channel_message(), "not_addressed", ""),
        (app_mention(text=f"<@{BOT_USER}>"), "empty", ""),
        (envelope({"type": "assistant_thread_started"}), "malformed", "assistant_thread"),
        (assistant_thread(user_id=None), "malformed", "assistant_thread"),
        (assistant_thread(channel_id=None), "malformed", "assistant_thread"),
        (assistant_thread(thread_ts="never"), "malformed", "assistant_thread"),
    ],
)
def test_why_an_event_is_ignored_is_told_with_its_detail(
    body: object, reason: str, detail: str
) -> None:
    result = parse(body)
    assert isinstance(result, Ignored), result
    assert (result.reason.value, result.detail) == (reason, detail)


def test_channel_type_decides_a_dm_before_the_channel_id() -> None:
    assert message_of(dm(channel="C0LAN2Q65", channel_type="im")).is_dm
    group = dm(channel="D024BE91L", channel_type="mpim", text="hello")
    assert parse(group) == Ignored(IgnoreReason.NOT_ADDRESSED)  # a group DM needs a mention


def test_a_file_share_without_text_is_a_message_with_empty_text() -> None:
    message = message_of(dm(text=None, files=[SHARED_FILE], subtype="file_share"))
    assert message.text == "" and [f.id for f in message.files] == [SHARED_FILE["id"]]


def test_a_broken_file_entry_is_skipped_and_the_next_one_kept() -> None:
    files = ["not a file", {"id": "F0BROKEN1"}, SHARED_FILE]
    message = message_of(dm(files=files, subtype="file_share"))
    assert [f.id for f in message.files] == [SHARED_FILE["id"]]


def test_the_backfill_and_title_reach_the_runner() -> None:
    message: SlackMessage = message_of(app_mention())
    earlier = BackfillMessage(author=Author(id="U9", name="Grace"), text="context", timestamp=1.0)
    incoming = message.to_incoming("Ada", backfill=(earlier,), title="River")
    assert incoming.backfill == (earlier,) and incoming.title == "River"
    assert incoming.author == Author(id=message.user_id, name="Ada")
