"""End to end: mentions, thread follow-ups, DMs, de-duplication, backfill, files, allow-lists.

The real bolt app and slack_sdk against FakeSlack, the real runner on SQLite, ScriptedModel.
HTTP mode with signed requests unless a test says Socket Mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.messages import Image, Text, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import (
    ALICE,
    BOB,
    EchoTool,
    Mode,
    message_event,
    running,
    slack_hosted,
    texts,
)
from tests.fakes.sample_images import plain
from tests.fakes.slack_server import FakeSlack


def user_texts(request: ModelRequest) -> list[str]:
    """What the model read from people in one request (text parts)."""
    found: list[str] = []
    for message in request.messages:
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                found.append(content)
            else:
                found += [part.text for part in content if isinstance(part, Text)]
    return found


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_a_mention_gets_a_threaded_answer_with_one_attachment_per_tool_call(
    fake_slack: FakeSlack, tmp_path: Path, mode: Mode
) -> None:
    fake_slack.add_user(ALICE, "alice", display_name="Alice")
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[call("echo", {"text": "one"}), call("echo", {"text": "two"})],
            ),
            Reply(text="Both echoes came back."),
        ]
    )
    async with running(fake_slack, tmp_path, model, mode=mode, tools=[EchoTool()]) as app:
        event = message_event(fake_slack, "please echo twice")
        assert await app.event(event) == 200
        await app.settle()

    replies = app.replies("C1", event["ts"])
    assert replies, "the answer goes in the mention's thread"
    assert all(reply.get("thread_ts") == event["ts"] for reply in replies)
    assert "Both echoes came back." in texts(replies)
    attachments = [a for reply in replies for a in reply.get("attachments", [])]
    assert len(attachments) == 2
    assert "echo: one" in texts(attachments) and "echo: two" in texts(attachments)
    # The model read who asked, by display name, without the bot's own mention.
    first = user_texts(model.requests[0])
    assert any("Alice" in text and "please echo twice" in text for text in first)
    assert not any(f"<@{fake_slack.bot_user_id}>" in text for text in first)
    assert "white_check_mark" in fake_slack.reactions("C1", event["ts"])


async def test_a_thread_follow_up_needs_no_mention(fake_slack: FakeSlack, tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="first answer"), Reply(text="second answer")])
    async with running(fake_slack, tmp_path, model) as app:
        mention = message_event(fake_slack, "hello")
        await app.event(mention)
        await app.settle()
        follow_up = message_event(
            fake_slack,
            "and another thing",
            thread_ts=mention["ts"],
            mention=False,
            kind="message",
            user=BOB,
        )
        await app.event(follow_up)
        await app.settle()
        # A message elsewhere in the channel without a mention is not for Teammate.
        await app.event(message_event(fake_slack, "lunch?", mention=False, kind="message"))
        await app.settle()

    assert len(model.requests) == 2
    assert "second answer" in texts(app.replies("C1", mention["ts"]))
    assert any("and another thing" in text for text in user_texts(model.requests[1]))


async def test_follow_ups_can_be_turned_off_for_a_channel(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="first answer")])
    channels = {f"slack:{fake_slack.team_id}:C1": {"follow_ups": False}}
    async with running(fake_slack, tmp_path, model, channels=channels) as app:
        mention = message_event(fake_slack, "hello")
        await app.event(mention)
        await app.settle()
        reply = message_event(
            fake_slack, "more", thread_ts=mention["ts"], mention=False, kind="message"
        )
        await app.event(reply)
        await app.settle()
    assert len(model.requests) == 1


async def test_a_direct_message_is_answered_in_its_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="hi from the DM")])
    async with running(fake_slack, tmp_path, model) as app:
        dm = message_event(fake_slack, "hello", channel="D1", mention=False, kind="message")
        await app.event(dm)
        await app.settle()
    assert "hi from the DM" in texts(app.replies("D1", dm["ts"]))


async def test_dms_turned_off_get_a_polite_note(fake_slack: FakeSlack, tmp_path: Path) -> None:
    model = ScriptedModel([])
    async with running(fake_slack, tmp_path, model, slack={"dms_enabled": False}) as app:
        dm = message_event(fake_slack, "hello", channel="D1", mention=False, kind="message")
        await app.event(dm)
        await app.event(dm | {}, event_id=None)  # delivered again: one note
        await app.settle()
    assert model.requests == []
    assert app.replies("D1", dm["ts"]) == []
    notes = [e for e in fake_slack.ephemerals if e.get("user") == ALICE]
    assert len(notes) == 1 and "direct messages" in notes[0]["text"]


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_the_same_event_three_times_is_answered_once_also_across_a_restart(
    fake_slack: FakeSlack, tmp_path: Path, mode: Mode
) -> None:
    model = ScriptedModel([Reply(text="only once")], default=Reply(text="AGAIN"))
    event = message_event(fake_slack, "hello")
    async with running(fake_slack, tmp_path, model, mode=mode) as app:
        for retry in (None, 1, 2):
            assert await app.event(event, event_id="EvSAME", retry_num=retry) == 200
        await app.settle()
    async with running(fake_slack, tmp_path, model, mode=mode) as app:  # same database file
        assert await app.event(event, event_id="EvSAME", retry_num=3) == 200
        await app.settle()
    assert len(model.requests) == 1
    assert "AGAIN" not in texts(fake_slack.bot_replies("C1", event["ts"]))


async def test_a_mention_in_a_thread_delivered_as_mention_and_message_is_answered_once(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="parent answer"), Reply(text="one answer")])
    async with running(fake_slack, tmp_path, model) as app:
        parent = message_event(fake_slack, "start")
        await app.event(parent)
        await app.settle()
        mention = message_event(fake_slack, "and now?", thread_ts=parent["ts"])
        as_message = mention | {"type": "message", "channel_type": "channel"}
        await app.event(mention)
        await app.event(as_message)
        await app.settle()
    assert len(model.requests) == 2


async def test_first_mention_in_an_existing_thread_backfills_it(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.add_user(ALICE, "alice", display_name="Alice")
    fake_slack.add_user(BOB, "bob", display_name="Bob")
    parent = fake_slack.seed_message("C1", "the nightly build is red", user=BOB)
    fake_slack.seed_message("C1", "since the compiler bump", user=ALICE, thread_ts=parent["ts"])
    model = ScriptedModel([Reply(text="Looks like the compiler.")])
    async with running(fake_slack, tmp_path, model) as app:
        mention = message_event(fake_slack, "any idea?", thread_ts=parent["ts"])
        await app.event(mention)
        await app.settle()
    seen = "\n".join(user_texts(model.requests[0]))
    assert "the nightly build is red" in seen and "Bob" in seen
    assert "since the compiler bump" in seen
    assert seen.index("since the compiler bump") < seen.index("any idea?")
    assert "Looks like the compiler." in texts(app.replies("C1", parent["ts"]))


async def test_an_image_and_a_text_file_reach_the_model_and_the_workspace(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    png = plain((4, 4))
    image = slack_hosted(fake_slack.add_file("cat.png", png, "image/png"))
    notes = slack_hosted(fake_slack.add_file("notes.txt", b"remember the milk", "text/plain"))
    model = ScriptedModel([Reply(text="Nice cat.")])
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "look", files=[image, notes])
        await app.event(event)
        await app.settle()
        workspaces = app.workspaces
    [request] = model.requests
    images = [
        part
        for message in request.messages
        if isinstance(message, UserMessage) and not isinstance(message.content, str)
        for part in message.content
        if isinstance(part, Image)
    ]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    saved = list(workspaces.glob("*/attachments/notes.txt"))
    assert len(saved) == 1 and saved[0].read_bytes() == b"remember the milk"
    assert any("notes.txt" in text for text in user_texts(request))


async def test_a_disallowed_channel_is_ignored_with_a_note(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="allowed here")])
    allowed = [f"slack:{fake_slack.team_id}:C1"]
    async with running(fake_slack, tmp_path, model, allowed_channels=allowed) as app:
        outside = message_event(fake_slack, "hello", channel="C2")
        await app.event(outside)
        inside = message_event(fake_slack, "hello", channel="C1")
        await app.event(inside)
        await app.settle()
    assert len(model.requests) == 1
    assert app.replies("C2", outside["ts"]) == []
    assert [e["channel"] for e in fake_slack.ephemerals] == ["C2"]
    assert "allowed here" in texts(app.replies("C1", inside["ts"]))


async def test_a_bad_or_stale_signature_gets_401_and_nothing_runs(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    import time

    from tests.bots.platforms.slack.e2e_harness import SECRET
    from tests.fakes.slack_server import signed_request

    model = ScriptedModel([])
    async with running(fake_slack, tmp_path, model) as app:
        payload = fake_slack.event_callback(message_event(fake_slack, "hello"))
        wrong = await signed_request(app.url, payload, SECRET, wrong_signature=True)
        stale = await signed_request(app.url, payload, SECRET, timestamp=int(time.time()) - 10 * 60)
        other = await signed_request(app.url, payload, "not-the-secret")
        await app.settle()
    assert (wrong.status, stale.status, other.status) == (401, 401, 401)
    assert model.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_bots_and_messages_for_someone_else_get_no_answer(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="first answer")])
    async with running(fake_slack, tmp_path, model) as app:
        mention = message_event(fake_slack, "hello")
        await app.event(mention)
        await app.settle()
        # Another bot mentions Teammate in the thread: no answer, so no loop can start.
        other_bot = message_event(fake_slack, "ping", thread_ts=mention["ts"])
        await app.event(other_bot | {"bot_id": "BOTHER", "subtype": "bot_message"})
        # Teammate's own reply, as Slack echoes it back.
        own = message_event(
            fake_slack, "echo", thread_ts=mention["ts"], mention=False, kind="message"
        )
        await app.event(own | {"user": fake_slack.bot_user_id, "bot_id": fake_slack.bot_id})
        # A reply in the thread that only mentions someone else.
        aside = message_event(
            fake_slack,
            f"<@{BOB}> can you look?",
            thread_ts=mention["ts"],
            mention=False,
            kind="message",
        )
        await app.event(aside)
        # An edit of the mention.
        await app.event(
            {
                "type": "message",
                "subtype": "message_changed",
                "channel": "C1",
                "ts": "1796000000.000900",
                "message": {"user": ALICE, "text": f"<@{fake_slack.bot_user_id}> edited"},
            }
        )
        await app.settle()
    assert len(model.requests) == 1


async def test_a_person_not_on_the_allow_list_is_told_and_not_answered(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="for Bob")])
    async with running(fake_slack, tmp_path, model, allowed_users=[BOB]) as app:
        refused = message_event(fake_slack, "hello", user=ALICE)
        await app.event(refused)
        allowed = message_event(fake_slack, "hello", user=BOB)
        await app.event(allowed)
        await app.settle()
        # Alice talks on in Bob's thread without mentioning Teammate: no note every time.
        aside = message_event(
            fake_slack, "nice", thread_ts=allowed["ts"], mention=False, kind="message"
        )
        await app.event(aside)
        await app.settle()
    assert len(model.requests) == 1
    assert app.replies("C1", refused["ts"]) == []
    assert [e["user"] for e in fake_slack.ephemerals] == [ALICE]


async def test_socket_mode_reconnects_through_apps_connections_open(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="before"), Reply(text="after")])
    async with running(fake_slack, tmp_path, model, mode="socket") as app:
        first = message_event(fake_slack, "one")
        await app.event(first)
        await app.settle()
        await fake_slack.disconnect()
        await fake_slack.wait_for(lambda f: f.connections >= 2 and f.socket_connected, 30)
        second = message_event(fake_slack, "two")
        await app.event(second)
        await app.settle()
    assert len(fake_slack.calls_to("apps.connections.open")) >= 2
    assert "after" in texts(app.replies("C1", second["ts"]))


async def test_a_message_arriving_twice_at_once_is_prepared_once(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    parent = fake_slack.seed_message("C1", "the build is red", user=BOB)
    model = ScriptedModel([Reply(text="one answer")])
    fake_slack.delay("conversations.replies", 0.5)  # the first is still reading the thread
    async with running(fake_slack, tmp_path, model) as app:
        mention = message_event(fake_slack, "why?", thread_ts=parent["ts"])
        await app.event(mention)
        await app.event(mention | {"type": "message", "channel_type": "channel"})
        await app.settle()
    assert len(model.requests) == 1
    assert len(fake_slack.calls_to("conversations.replies")) == 1


async def test_a_file_the_assistant_writes_is_uploaded_to_the_thread(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    from tests.bots.platforms.slack.e2e_harness import ReportTool

    model = ScriptedModel(
        [Reply(tool_calls=[call("report", {"text": "all green"})]), Reply(text="Attached.")]
    )
    async with running(fake_slack, tmp_path, model, tools=[ReportTool()]) as app:
        event = message_event(fake_slack, "write the report")
        await app.event(event)
        await app.settle()
    [uploaded] = [f for f in fake_slack.files.values() if f.name == "report.txt"]
    assert uploaded.content == b"all green"
    assert (uploaded.channel, uploaded.thread_ts) == ("C1", event["ts"])


async def test_people_mentioned_are_named_for_the_model(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.add_user(BOB, "bob", display_name="Bob")
    model = ScriptedModel([Reply(text="ok")])
    async with running(fake_slack, tmp_path, model) as app:
        await app.event(message_event(fake_slack, f"what did <@{BOB}> change?"))
        await app.settle()
    assert any("what did @Bob change?" in text for text in user_texts(model.requests[0]))
