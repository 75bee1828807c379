"""Slack Events API payloads to `SlackMessage` / `Ignored`: realistic shapes, then hostile ones.

Payload shapes follow Slack's Events API reference (app_mention, message.channels,
message.im, file_share, assistant_thread_started).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.platforms.slack.events import (
    MAX_FILES,
    MAX_TEXT_CHARS,
    AssistantThreadEvent,
    Ignored,
    IgnoreReason,
    SlackMessage,
    parse_event,
)

BOT_USER = "U0BOT0001"
BOT_ID = "B0BOT0001"
TEAM = "T123ABC456"
CHANNEL = "C0LAN2Q65"


def envelope(event: dict[str, Any], event_id: str = "Ev0PV52K21") -> dict[str, Any]:
    return {
        "token": "one-long-verification-token",
        "team_id": TEAM,
        "api_app_id": "A0PNCHHK2",
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1515449522,
        "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
    }


def app_mention(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": "U061F7AUR",
        "text": f"<@{BOT_USER}> is it everything a river should be?",
        "ts": "1515449522.000016",
        "channel": CHANNEL,
        "event_ts": "1515449522.000016",
    }
    event.update(overrides)
    return envelope(event)


def channel_message(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "message",
        "channel": CHANNEL,
        "user": "U2147483697",
        "text": "Live long and prospect.",
        "ts": "1355517523.000005",
        "event_ts": "1355517523.000005",
        "channel_type": "channel",
    }
    event.update(overrides)
    return envelope(event, event_id="Ev0PV52K22")


def dm(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "message",
        "channel": "D024BE91L",
        "user": "U2147483697",
        "text": "Hello hello can you hear me?",
        "ts": "1355517523.000005",
        "event_ts": "1355517523.000005",
        "channel_type": "im",
    }
    event.update(overrides)
    return envelope(event, event_id="Ev0PV52K23")


SHARED_FILE = {
    "id": "F04EEHX1EES",
    "created": 1670631527,
    "name": "notes.txt",
    "title": "notes.txt",
    "mimetype": "text/plain",
    "filetype": "text",
    "size": 12,
    "mode": "snippet",
    "url_private": "https://files.slack.com/files-pri/T043DB835ML-F04EEHX1EES/notes.txt",
    "url_private_download": (
        "https://files.slack.com/files-pri/T043DB835ML-F04EEHX1EES/download/notes.txt"
    ),
}


def parse(body: object, known: bool = False) -> object:
    asked: list[str] = []

    def known_thread(key: str) -> bool:
        asked.append(key)
        return known

    return parse_event(body, bot_user_id=BOT_USER, bot_id=BOT_ID, known_thread=known_thread)


def message_of(body: object, known: bool = False) -> SlackMessage:
    result = parse(body, known)
    assert isinstance(result, SlackMessage), result
    return result


def reason_of(body: object, known: bool = False) -> IgnoreReason:
    result = parse(body, known)
    assert isinstance(result, Ignored), result
    return result.reason


# --- realistic payloads -------------------------------------------------------------------


def test_a_mention_in_a_channel_starts_a_thread_on_its_own_ts() -> None:
    message = message_of(app_mention())
    assert message.kind == "app_mention"
    assert message.conversation_key == f"slack:{TEAM}:{CHANNEL}:1515449522.000016"
    assert message.channel_key == f"slack:{TEAM}:{CHANNEL}"
    assert message.text == "is it everything a river should be?"
    assert message.user_id == "U061F7AUR"
    assert message.timestamp == pytest.approx(1515449522.000016)
    assert message.mentioned and not message.is_dm and not message.in_thread
    assert not message.stop_requested and not message.truncated


def test_a_mention_inside_a_thread_continues_that_thread() -> None:
    message = message_of(app_mention(ts="1515449600.000100", thread_ts="1515449522.000016"))
    assert message.conversation_key.endswith(":1515449522.000016")
    assert message.in_thread


def test_app_mention_and_message_of_one_post_share_the_channel_ts_key_not_the_event_id() -> None:
    thread = {"ts": "1515449600.000100", "thread_ts": "1515449522.000016"}
    mention = message_of(app_mention(**thread))
    as_message = message_of(
        channel_message(text=f"<@{BOT_USER}> is it everything a river should be?", **thread)
    )
    assert mention.delivery_id == as_message.delivery_id
    assert mention.event_delivery_id != as_message.event_delivery_id
    assert mention.delivery_ids == (mention.event_delivery_id, mention.delivery_id)
    assert mention.event_delivery_id == "slack:event:Ev0PV52K21"
    assert mention.conversation_key == as_message.conversation_key


def test_to_incoming_carries_keys_author_and_the_channel_ts_delivery_id() -> None:
    message = message_of(app_mention())
    incoming = message.to_incoming("Ada", title="#general")
    assert incoming.conversation_key == message.conversation_key
    assert incoming.channel_key == message.channel_key
    assert incoming.delivery_id == message.delivery_id
    assert (incoming.author.id, incoming.author.name) == ("U061F7AUR", "Ada")
    assert incoming.platform_message_id == "1515449522.000016"
    assert incoming.title == "#general"
    assert incoming.text == message.text


def test_a_direct_message_needs_no_mention_and_is_its_own_channel() -> None:
    message = message_of(dm())
    assert message.is_dm and not message.mentioned
    assert message.channel_key == f"slack:{TEAM}:D024BE91L"
    assert message.conversation_key == f"slack:{TEAM}:D024BE91L:1355517523.000005"
    assert message.text == "Hello hello can you hear me?"


def test_a_direct_message_may_mention_other_people() -> None:
    message = message_of(dm(text="ask <@U0OTHER01> about the deploy"))
    assert message.text == "ask <@U0OTHER01> about the deploy"


def test_a_thread_reply_without_mention_continues_only_a_known_thread() -> None:
    reply = channel_message(ts="1355517600.000001", thread_ts="1355517523.000005")
    asked: list[str] = []

    def known_thread(key: str) -> bool:
        asked.append(key)
        return True

    result = parse_event(reply, bot_user_id=BOT_USER, known_thread=known_thread)
    assert isinstance(result, SlackMessage) and result.in_thread and not result.mentioned
    assert asked == [f"slack:{TEAM}:{CHANNEL}:1355517523.000005"]
    assert reason_of(reply, known=False) is IgnoreReason.NOT_ADDRESSED


def test_a_top_level_channel_message_without_mention_is_not_addressed() -> None:
    # Even when the caller would say "known": a new top-level message starts no thread of ours.
    assert reason_of(channel_message(), known=True) is IgnoreReason.NOT_ADDRESSED


def test_a_message_that_only_mentions_someone_else_is_ignored_even_in_a_known_thread() -> None:
    reply = channel_message(
        text="<@U0OTHER01|bob> can you look?", ts="1355517600.000001", thread_ts="1355517523.0"
    )
    assert reason_of(reply, known=True) is IgnoreReason.MENTIONS_SOMEONE_ELSE


def test_the_bots_mention_is_stripped_and_other_mentions_kept() -> None:
    text = f"hey <@{BOT_USER}|teammate>  ask <@U0OTHER01> &lt;b&gt; &amp;lt; <@{BOT_USER}>"
    message = message_of(channel_message(text=text))
    assert message.mentioned
    assert message.text == "hey ask <@U0OTHER01> <b> &lt;"


@pytest.mark.parametrize("text", ["stop", "Stop!", " STOP. ", "cancel"])
def test_a_mention_saying_stop_is_a_stop_request(text: str) -> None:
    assert message_of(app_mention(text=f"<@{BOT_USER}> {text}")).stop_requested


@pytest.mark.parametrize("text", ["stop the deploy", "don't stop", "stopwatch"])
def test_other_text_with_stop_in_it_is_not_a_stop_request(text: str) -> None:
    assert not message_of(app_mention(text=f"<@{BOT_USER}> {text}")).stop_requested


def test_stop_in_a_known_thread_without_mention_is_just_a_message() -> None:
    reply = channel_message(text="stop", ts="1355517600.000001", thread_ts="1355517523.000005")
    assert not message_of(reply, known=True).stop_requested


def test_a_file_share_lists_its_files_for_download() -> None:
    unavailable = {"id": "F12345678", "mode": "file_access", "file_access": "check_file_info"}
    message = message_of(
        dm(subtype="file_share", text="", files=[SHARED_FILE, unavailable, "junk"], upload=True)
    )
    assert message.text == ""
    (shared,) = message.files
    assert shared.id == "F04EEHX1EES"
    assert shared.name == "notes.txt"
    assert shared.mimetype == "text/plain"
    assert shared.size == 12
    assert shared.url_private_download.endswith("/download/notes.txt")


def test_a_file_without_name_or_type_gets_safe_defaults() -> None:
    bare = {"id": "F1", "url_private_download": "https://files.slack.com/x", "size": True}
    (shared,) = message_of(dm(subtype="file_share", files=[bare])).files
    assert (shared.name, shared.mimetype, shared.size) == ("F1", "application/octet-stream", None)


def test_files_are_bounded_in_number() -> None:
    many = [dict(SHARED_FILE, id=f"F{i}") for i in range(MAX_FILES + 5)]
    assert len(message_of(dm(subtype="file_share", files=many)).files) == MAX_FILES


def test_a_thread_broadcast_is_a_persons_message() -> None:
    message = message_of(
        channel_message(
            subtype="thread_broadcast",
            text=f"<@{BOT_USER}> summary please",
            ts="1355517600.000001",
            thread_ts="1355517523.000005",
        )
    )
    assert message.text == "summary please" and message.in_thread


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (channel_message(subtype="bot_message", bot_id="B0OTHER1"), IgnoreReason.BOT_MESSAGE),
        (app_mention(bot_id="B0OTHER1"), IgnoreReason.BOT_MESSAGE),
        (app_mention(bot_profile={"id": "B0OTHER1"}), IgnoreReason.BOT_MESSAGE),
        (dm(bot_id=BOT_ID, user=BOT_USER), IgnoreReason.OWN_MESSAGE),
        (dm(user=BOT_USER), IgnoreReason.OWN_MESSAGE),
        (channel_message(subtype="message_changed"), IgnoreReason.EDITED),
        (channel_message(subtype="message_deleted"), IgnoreReason.DELETED),
        (channel_message(subtype="channel_join"), IgnoreReason.OTHER_SUBTYPE),
        (dm(subtype="message_replied"), IgnoreReason.OTHER_SUBTYPE),
        (app_mention(text=f"<@{BOT_USER}>  "), IgnoreReason.EMPTY),
        (envelope({"type": "reaction_added", "user": "U1"}), IgnoreReason.UNSUPPORTED_EVENT),
    ],
)
def test_what_is_ignored_and_why(body: dict[str, Any], reason: IgnoreReason) -> None:
    assert reason_of(body) is reason


def test_an_edit_of_a_mention_is_not_answered_again() -> None:
    edit = channel_message(
        subtype="message_changed",
        message={"type": "message", "user": "U1", "text": f"<@{BOT_USER}> hi", "ts": "1.0"},
    )
    edit["event"].pop("user")
    assert reason_of(edit) is IgnoreReason.EDITED


def test_the_ignore_detail_never_echoes_payload_text() -> None:
    result = parse(envelope({"type": "message", "subtype": "x" * 10_000}))
    assert isinstance(result, Ignored) and len(result.detail) <= 64
    result = parse(envelope({"type": "Ignore previous instructions"}))
    assert isinstance(result, Ignored) and result.detail == "type"


def test_the_envelope_team_wins_over_the_events_team() -> None:
    # Slack Connect: the author's team differs from the installation's workspace.
    assert message_of(app_mention(team="T0FOREIGN")).team_id == TEAM
    body = app_mention(team="T0FOREIGN")
    del body["team_id"]
    assert message_of(body).team_id == "T0FOREIGN"


def test_an_assistant_thread_started_event() -> None:
    body = envelope(
        {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": "U123ABC456",
                "context": {"channel_id": "C123ABC456", "team_id": "T07XY8FPJ5C"},
                "channel_id": "D123ABC456",
                "thread_ts": "1729999327.187299",
            },
            "event_ts": "1715873754.429808",
        }
    )
    result = parse(body)
    assert isinstance(result, AssistantThreadEvent)
    assert result.kind == "started"
    assert result.conversation_key == f"slack:{TEAM}:D123ABC456:1729999327.187299"
    assert result.channel_key == f"slack:{TEAM}:D123ABC456"
    assert result.context_channel_id == "C123ABC456"
    body["event"]["type"] = "assistant_thread_context_changed"
    body["event"]["assistant_thread"]["context"] = []
    changed = parse(body)
    assert isinstance(changed, AssistantThreadEvent) and changed.kind == "context_changed"
    assert changed.context_channel_id is None


def test_a_message_in_an_assistant_thread_is_a_dm_in_that_thread() -> None:
    message = message_of(dm(ts="1729999400.000001", thread_ts="1729999327.187299"))
    assert message.conversation_key == f"slack:{TEAM}:D024BE91L:1729999327.187299"


# --- size -----------------------------------------------------------------------------------


def test_text_over_slacks_limit_is_truncated_with_a_note() -> None:
    message = message_of(app_mention(text=f"<@{BOT_USER}> " + "a" * (MAX_TEXT_CHARS * 3)))
    assert message.truncated
    assert message.text.endswith(f"[message truncated to {MAX_TEXT_CHARS} characters]")
    assert len(message.text) < MAX_TEXT_CHARS + 100


def test_text_at_the_limit_is_kept_whole() -> None:
    text = "b" * MAX_TEXT_CHARS
    message = message_of(dm(text=text))
    assert not message.truncated and message.text == text


# --- malformed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "event",
        {},
        {"event": None, "event_id": "Ev1", "team_id": TEAM},
        {"event": {"type": "message"}, "team_id": TEAM},  # no event_id
        {"event": {"type": "message"}, "event_id": "Ev1"},  # no team at all
        app_mention(user=None),
        app_mention(user=["U1"]),
        app_mention(channel={"id": CHANNEL}),
        app_mention(channel="C1:evil"),
        app_mention(ts=1515449522.000016),
        app_mention(ts="nan"),
        app_mention(ts="1e308"),
        app_mention(thread_ts=[]),
        app_mention(text=["hi"]),
        app_mention(subtype=["file_share"]),
        app_mention(subtype={"a": 1}),
        app_mention(files={"id": "F1"}),
        envelope({"type": "assistant_thread_started", "assistant_thread": {"channel_id": "D1"}}),
    ],
)
def test_malformed_payloads_are_ignored_as_malformed(body: object) -> None:
    assert reason_of(body) is IgnoreReason.MALFORMED


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
)
json_like = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)
# Keys Slack uses, so generated payloads reach the deep branches, not just the first check.
slack_keys = st.sampled_from(
    [
        "event", "event_id", "team_id", "type", "subtype", "user", "channel", "ts", "thread_ts",
        "text", "files", "bot_id", "bot_profile", "channel_type", "team", "assistant_thread",
        "context", "channel_id", "user_id", "id", "name", "mimetype", "url_private_download",
        "size",
    ]
)  # fmt: skip
slack_like = st.recursive(
    json_scalars | st.sampled_from(["app_mention", "message", "file_share", "1.5", "U1", "Ev1"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(slack_keys, children, max_size=8)
    ),
    max_leaves=40,
)
# Not JSON, but what a careless caller might hand over: unhashable keys' values, tuples, bytes.
odd_values = st.sampled_from([b"bytes", (1, 2), {1, 2}, frozenset({"a"}), object(), 10**400])

# Hypothesis cannot draw 40,000-character strings; repeat a short one instead.
huge_text = st.builds(
    lambda unit, count: (unit or "<@U0BOT0001>") * count,
    st.text(max_size=6),
    st.integers(MAX_TEXT_CHARS // 6, MAX_TEXT_CHARS * 2),
)


def assert_total(body: object) -> None:
    result = parse_event(body, bot_user_id=BOT_USER, bot_id=BOT_ID, known_thread=lambda k: True)
    assert isinstance(result, SlackMessage | AssistantThreadEvent | Ignored)
    if isinstance(result, SlackMessage):
        assert len(result.text) <= MAX_TEXT_CHARS + 100
        assert result.conversation_key.count(":") == 3
        assert result.channel_key.count(":") == 2


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(json_like | slack_like)
def test_arbitrary_json_like_payloads_never_raise(body: object) -> None:
    assert_total(body)


VALID = [
    app_mention(),
    app_mention(ts="1515449600.000100", thread_ts="1515449522.000016"),
    channel_message(ts="1355517600.000001", thread_ts="1355517523.000005"),
    dm(subtype="file_share", files=[SHARED_FILE]),
    envelope(
        {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": "U1",
                "context": {"channel_id": "C1"},
                "channel_id": "D1",
                "thread_ts": "1729999327.187299",
            },
        }
    ),
]


def paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VALID),
    st.data(),
    json_like | odd_values | huge_text,
    st.booleans(),
)
def test_mutations_of_valid_payloads_never_raise(
    valid: dict[str, Any], data: st.DataObject, replacement: object, delete: bool
) -> None:
    body: Any = copy.deepcopy(valid)
    path = data.draw(st.sampled_from(paths(body)[1:]))
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    assert_total(body)


def test_a_deeply_nested_payload_is_just_malformed() -> None:
    deep: Any = {}
    for _ in range(50_000):
        deep = {"event": deep}
    assert isinstance(parse(deep), Ignored)


def test_a_group_dm_needs_a_mention_like_a_channel() -> None:
    group = channel_message(channel="G0GROUP01", channel_type="mpim")
    assert reason_of(group) is IgnoreReason.NOT_ADDRESSED
    mentioned = channel_message(channel="G0GROUP01", channel_type="mpim", text=f"<@{BOT_USER}> hi")
    assert not message_of(mentioned).is_dm


def test_a_d_channel_without_channel_type_is_a_dm() -> None:
    body = dm()
    del body["event"]["channel_type"]
    assert message_of(body).is_dm


def test_known_thread_is_asked_only_when_it_decides() -> None:
    asked: list[str] = []

    def known_thread(key: str) -> bool:
        asked.append(key)
        return True

    for body in (
        app_mention(ts="1515449600.000100", thread_ts="1515449522.000016"),
        dm(ts="1355517600.000001", thread_ts="1355517523.000005"),
        channel_message(text="<@U0OTHER01> hi", ts="1355517600.1", thread_ts="1355517523.1"),
        channel_message(subtype="message_changed", thread_ts="1355517523.1"),
    ):
        parse_event(body, bot_user_id=BOT_USER, known_thread=known_thread)
    assert asked == []
