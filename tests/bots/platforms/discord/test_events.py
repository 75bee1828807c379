"""Discord gateway payloads to `DiscordMessage` / `SlashCommand` / `ButtonPress` / `Ignored`:
realistic shapes, then hostile ones.

Payload shapes follow Discord's API v10 reference (Message, Interaction, Application Command
Interaction Data, Message Component Interaction Data).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.platforms.discord.events import (
    MAX_ATTACHMENTS,
    MAX_PROMPT_CHARS,
    MAX_TEXT_CHARS,
    ButtonPress,
    DiscordMessage,
    Ignored,
    IgnoreReason,
    SlashCommand,
    feedback_custom_id,
    parse_custom_id,
    parse_interaction,
    parse_message,
    snowflake_time,
    stop_custom_id,
)

BOT = "1100000000000000001"
APP = "1100000000000000002"
GUILD = "1200000000000000001"
CHANNEL = "1300000000000000001"
THREAD = "1300000000000000777"
ADA = "1400000000000000001"
BOB = "1400000000000000002"
MESSAGE = "1500000000000000001"


def user(user_id: str = ADA, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": user_id,
        "username": "ada",
        "global_name": "Ada Lovelace",
        "discriminator": "0",
        "avatar": None,
    }
    data.update(overrides)
    return data


def message(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": MESSAGE,
        "type": 0,
        "channel_id": CHANNEL,
        "guild_id": GUILD,
        "author": user(),
        "member": {"nick": None, "roles": ["1600000000000000001"], "joined_at": "2024-01-01"},
        "content": f"<@{BOT}> is it everything a river should be?",
        "timestamp": "2026-12-01T10:00:00.000000+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [user(BOT, username="teammate", global_name=None, bot=True)],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "flags": 0,
        "components": [],
    }
    data.update(overrides)
    return data


def dm_message(**overrides: Any) -> dict[str, Any]:
    data = message(content="Hello hello can you hear me?", mentions=[], channel_id="1700000000000")
    del data["guild_id"], data["member"]
    data.update(overrides)
    return data


ATTACHMENT = {
    "id": "1800000000000000001",
    "filename": "notes.txt",
    "size": 12,
    "url": "https://cdn.discordapp.com/attachments/1/2/notes.txt?ex=1&is=2&hm=3",
    "proxy_url": "https://media.discordapp.net/attachments/1/2/notes.txt",
    "content_type": "text/plain; charset=utf-8",
}


def parse(
    payload: object,
    *,
    parent: str | None = None,
    known: bool = False,
    event: str = "MESSAGE_CREATE",
    asked: list[str] | None = None,
) -> object:
    def known_thread(key: str) -> bool:
        if asked is not None:
            asked.append(key)
        return known

    return parse_message(
        payload,
        bot_user_id=BOT,
        event=event,
        thread_parent=lambda channel: parent,
        known_thread=known_thread,
    )


def message_of(payload: object, **kwargs: Any) -> DiscordMessage:
    result = parse(payload, **kwargs)
    assert isinstance(result, DiscordMessage), result
    return result


def reason_of(payload: object, **kwargs: Any) -> IgnoreReason:
    result = parse(payload, **kwargs)
    assert isinstance(result, Ignored), result
    return result.reason


# --- messages --------------------------------------------------------------------------------


def test_a_mention_in_a_channel_opens_a_thread_named_after_the_message() -> None:
    found = message_of(message())
    assert found.opens_thread and found.mentioned and not found.is_dm
    assert found.thread_id == MESSAGE
    assert found.conversation_key == f"discord:{GUILD}:{MESSAGE}"
    assert found.channel_key == f"discord:{GUILD}:{CHANNEL}"
    assert found.delivery_id == f"discord:msg:{MESSAGE}"
    assert found.text == "is it everything a river should be?"
    assert (found.person.user_id, found.person.name) == (ADA, "Ada Lovelace")
    assert found.person.role_ids == ("1600000000000000001",)
    assert not found.stop_requested and not found.truncated and not found.in_teammate_thread


def test_the_timestamp_comes_from_the_snowflake() -> None:
    # Discord's documented example: 175928847299117063 was made at 2016-04-30 11:18:25.796 UTC.
    assert snowflake_time("175928847299117063") == pytest.approx(1462015105.796)
    assert message_of(message(id="175928847299117063")).timestamp == pytest.approx(1462015105.796)


def test_to_incoming_carries_keys_author_and_delivery() -> None:
    found = message_of(message())
    incoming = found.to_incoming(title="#general")
    assert incoming.conversation_key == found.conversation_key
    assert incoming.channel_key == found.channel_key
    assert incoming.delivery_id == f"discord:msg:{MESSAGE}"
    assert (incoming.author.id, incoming.author.name) == (ADA, "Ada Lovelace")
    assert incoming.platform_message_id == MESSAGE
    assert (incoming.title, incoming.text) == ("#general", found.text)


def test_the_guild_nickname_wins_over_the_global_name_and_the_username() -> None:
    assert message_of(message(member={"nick": "  The  Countess ", "roles": []})).person.name == (
        "The Countess"
    )
    assert message_of(message(author=user(global_name=None))).person.name == "ada"
    nameless = message_of(message(author=user(global_name="", username=None)))
    assert nameless.person.name == ADA


def test_the_nickname_mention_form_counts_too() -> None:
    found = message_of(message(content=f"<@!{BOT}> hi"))
    assert found.mentioned and found.text == "hi"


def test_a_mention_inside_a_thread_continues_that_thread() -> None:
    asked: list[str] = []
    found = message_of(message(channel_id=THREAD), parent=CHANNEL, asked=asked)
    assert found.conversation_key == f"discord:{GUILD}:{THREAD}"
    assert found.channel_key == f"discord:{GUILD}:{CHANNEL}"
    assert not found.opens_thread and not found.in_teammate_thread
    assert asked == []  # a mention decides alone


def test_a_thread_message_without_mention_continues_only_a_teammate_thread() -> None:
    plain = message(channel_id=THREAD, content="and the tests?", mentions=[])
    asked: list[str] = []
    found = message_of(plain, parent=CHANNEL, known=True, asked=asked)
    assert found.in_teammate_thread and not found.mentioned and not found.opens_thread
    assert asked == [f"discord:{GUILD}:{THREAD}"]
    assert reason_of(plain, parent=CHANNEL, known=False) is IgnoreReason.NOT_ADDRESSED


def test_a_channel_message_without_mention_is_not_addressed() -> None:
    plain = message(content="lunch?", mentions=[])
    assert reason_of(plain, known=True) is IgnoreReason.NOT_ADDRESSED


def test_a_message_that_only_mentions_someone_else_is_ignored() -> None:
    other = message(content=f"<@{BOB}> can you look?", mentions=[user(BOB)])
    assert reason_of(other) is IgnoreReason.MENTIONS_SOMEONE_ELSE
    assert reason_of({**other, "channel_id": THREAD}, parent=CHANNEL, known=True) is (
        IgnoreReason.MENTIONS_SOMEONE_ELSE
    )


def test_other_mentions_are_named_and_the_bots_removed() -> None:
    text = f"hey <@{BOT}>  ask <@{BOB}> and <@1999> <@{BOT}>"
    found = message_of(message(content=text, mentions=[user(BOT), user(BOB, global_name="Bob")]))
    assert found.text == "hey ask @Bob and <@1999>"


def test_a_reply_to_the_bot_is_addressed_to_it_without_a_mention() -> None:
    reply = message(
        type=19,
        content="and what about rivers?",
        mentions=[],
        message_reference={"message_id": "1500000000000000000", "channel_id": CHANNEL},
        referenced_message=message(id="1500000000000000000", author=user(BOT, bot=True)),
    )
    found = message_of(reply)
    assert found.mentioned and found.opens_thread and found.thread_id == MESSAGE


def test_a_reply_to_an_answer_whose_thread_is_ours_continues_that_thread() -> None:
    answer = "1500000000000000000"
    reply = message(
        type=19,
        content="more please",
        mentions=[],
        message_reference={"message_id": answer},
        referenced_message=message(id=answer, author=user(BOT, bot=True)),
    )
    asked: list[str] = []
    found = message_of(reply, known=True, asked=asked)
    assert asked == [f"discord:{GUILD}:{answer}"]
    assert found.conversation_key == f"discord:{GUILD}:{answer}" and found.in_teammate_thread
    assert not found.opens_thread


def test_a_reply_to_someone_else_is_not_addressed() -> None:
    reply = message(
        type=19,
        content="agreed",
        mentions=[],
        message_reference={"message_id": "1500000000000000000"},
        referenced_message=message(author=user(BOB)),
    )
    assert reason_of(reply) is IgnoreReason.NOT_ADDRESSED


def test_a_direct_message_needs_no_mention_and_is_its_own_channel() -> None:
    found = message_of(dm_message())
    assert found.is_dm and not found.mentioned and not found.opens_thread
    assert found.conversation_key == "discord:dm:1700000000000"
    assert found.channel_key == "discord:dm:1700000000000"
    assert found.text == "Hello hello can you hear me?"
    assert found.person.role_ids == ()


def test_a_dm_may_mention_other_people_and_thread_lookups_are_not_asked() -> None:
    asked: list[str] = []
    found = message_of(
        dm_message(content=f"ask <@{BOB}>", mentions=[user(BOB)]), parent=CHANNEL, asked=asked
    )
    assert found.text == "ask @Ada Lovelace" and asked == []


@pytest.mark.parametrize("text", ["stop", "Stop!", " STOP. ", "cancel"])
def test_a_mention_saying_stop_is_a_stop_request(text: str) -> None:
    assert message_of(message(content=f"<@{BOT}> {text}")).stop_requested
    assert message_of(dm_message(content=text)).stop_requested


@pytest.mark.parametrize("text", ["stop the deploy", "don't stop", "stopwatch"])
def test_other_text_with_stop_in_it_is_not_a_stop_request(text: str) -> None:
    assert not message_of(message(content=f"<@{BOT}> {text}")).stop_requested


def test_stop_in_a_teammate_thread_without_mention_is_just_a_message() -> None:
    plain = message(channel_id=THREAD, content="stop", mentions=[])
    assert not message_of(plain, parent=CHANNEL, known=True).stop_requested


def test_attachments_are_listed_for_download_and_bounded() -> None:
    image = dict(ATTACHMENT, id="1800000000000000002", filename="a.png", content_type="image/png")
    junk = [
        "junk",
        {"id": "x", "url": "https://cdn/x"},
        dict(ATTACHMENT, url="file:///etc/passwd"),
        dict(ATTACHMENT, url="https://" + "a" * 3000),
    ]
    found = message_of(dm_message(content="", attachments=[ATTACHMENT, image, *junk]))
    notes, picture = found.files
    assert (notes.name, notes.content_type, notes.size) == (
        "notes.txt",
        "text/plain; charset=utf-8",
        12,
    )
    assert notes.url.startswith("https://cdn.discordapp.com/") and not notes.is_image
    assert picture.is_image
    bare = message_of(dm_message(attachments=[{"id": "18", "url": "http://127.0.0.1/x"}]))
    assert (bare.files[0].name, bare.files[0].content_type, bare.files[0].size) == (
        "18",
        "application/octet-stream",
        None,
    )
    many = [dict(ATTACHMENT, id=str(18 + i)) for i in range(MAX_ATTACHMENTS + 5)]
    assert len(message_of(dm_message(attachments=many)).files) == MAX_ATTACHMENTS


def test_a_file_makes_a_mention_without_text_worth_answering() -> None:
    found = message_of(message(content=f"<@{BOT}>", attachments=[ATTACHMENT]))
    assert found.text == "" and len(found.files) == 1 and not found.stop_requested


@pytest.mark.parametrize(
    ("payload", "event", "reason"),
    [
        (message(author=user(BOT, bot=True)), "MESSAGE_CREATE", IgnoreReason.OWN_MESSAGE),
        (message(author=user(BOT)), "MESSAGE_CREATE", IgnoreReason.OWN_MESSAGE),
        (message(author=user(BOB, bot=True)), "MESSAGE_CREATE", IgnoreReason.BOT_MESSAGE),
        (message(author=user(BOB, system=True)), "MESSAGE_CREATE", IgnoreReason.BOT_MESSAGE),
        (message(webhook_id="1900000000000000001"), "MESSAGE_CREATE", IgnoreReason.WEBHOOK),
        (message(type=7), "MESSAGE_CREATE", IgnoreReason.SYSTEM_MESSAGE),  # a member joined
        (message(type=18), "MESSAGE_CREATE", IgnoreReason.SYSTEM_MESSAGE),  # thread created
        (message(type=20), "MESSAGE_CREATE", IgnoreReason.SYSTEM_MESSAGE),  # a command reply
        (message(), "MESSAGE_UPDATE", IgnoreReason.EDITED),
        (message(edited_timestamp="2026-12-01T10:01:00+00:00"), "MESSAGE_CREATE", "edited"),
        (message(content=f"<@{BOT}>   "), "MESSAGE_CREATE", IgnoreReason.EMPTY),
        (dm_message(content=""), "MESSAGE_CREATE", IgnoreReason.EMPTY),
        (message(), "MESSAGE_DELETE", IgnoreReason.MALFORMED),
    ],
)
def test_what_is_ignored_and_why(payload: dict[str, Any], event: str, reason: str) -> None:
    assert reason_of(payload, event=event) == reason


def test_text_over_discords_limit_is_truncated_with_a_note() -> None:
    found = message_of(dm_message(content="a" * (MAX_TEXT_CHARS * 3)))
    assert found.truncated
    assert found.text.endswith(f"[message truncated to {MAX_TEXT_CHARS} characters]")
    assert len(found.text) < MAX_TEXT_CHARS + 100


def test_text_at_the_limit_is_kept_whole() -> None:
    text = "b" * MAX_TEXT_CHARS
    found = message_of(dm_message(content=text))
    assert not found.truncated and found.text == text


def test_a_thread_parent_that_is_not_a_snowflake_means_no_thread() -> None:
    found = message_of(message(), parent="not:a:snowflake")
    assert found.opens_thread and found.channel_key == f"discord:{GUILD}:{CHANNEL}"


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        "message",
        {},
        message(author=None),
        message(author={"id": 5}),
        message(id="15:evil"),
        message(id=str(2**64)),
        message(channel_id=None),
        message(guild_id="G1"),
        message(content=["hi"]),
        message(type="0"),
        message(type=True),
        message(attachments={"id": "1"}),
        message(mentions="everyone"),
    ],
)
def test_malformed_messages_are_ignored_as_malformed(payload: object) -> None:
    assert reason_of(payload) is IgnoreReason.MALFORMED


# --- interactions ----------------------------------------------------------------------------


def interaction(data: dict[str, Any], kind: int = 2, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": "2000000000000000001",
        "application_id": APP,
        "type": kind,
        "data": data,
        "guild_id": GUILD,
        "channel_id": CHANNEL,
        "channel": {"id": CHANNEL, "type": 0, "guild_id": GUILD, "name": "general"},
        "member": {"user": user(), "roles": ["1600000000000000001"], "nick": "Ada"},
        "token": "aW50ZXJhY3Rpb246MjAwMDAwMDAwMDAwMDAwMDAwMTpzZWNyZXQ",
        "version": 1,
        "locale": "en-US",
        "guild_locale": "en-US",
        "app_permissions": "2248473465835073",
        "context": 0,
    }
    payload.update(overrides)
    return payload


def command(name: str, options: list[dict[str, Any]] | None = None, **overrides: Any) -> Any:
    data: dict[str, Any] = {"id": "2100000000000000001", "name": name, "type": 1}
    if options is not None:
        data["options"] = options
    return interaction(data, **overrides)


def ask(prompt: object = "what changed?", **overrides: Any) -> Any:
    return command("ask", [{"name": "prompt", "type": 3, "value": prompt}], **overrides)


def button(custom_id: str, **overrides: Any) -> Any:
    return interaction(
        {"custom_id": custom_id, "component_type": 2},
        kind=3,
        message={"id": "1500000000000000009", "channel_id": CHANNEL, "content": "..."},
        **overrides,
    )


def in_dm(payload: dict[str, Any]) -> dict[str, Any]:
    payload = dict(payload)
    del payload["guild_id"], payload["member"]
    payload["user"] = user()
    payload["channel"] = {"id": "1700000000000", "type": 1}
    payload["channel_id"] = "1700000000000"
    return payload


def in_thread(payload: dict[str, Any]) -> dict[str, Any]:
    payload = dict(payload)
    payload["channel_id"] = THREAD
    payload["channel"] = {"id": THREAD, "type": 11, "parent_id": CHANNEL, "guild_id": GUILD}
    return payload


def test_ask_in_a_channel() -> None:
    found = parse_interaction(ask(" what changed? "))
    assert isinstance(found, SlashCommand) and found.name == "ask"
    assert found.prompt == "what changed?" and not found.truncated
    context = found.context
    assert context.interaction_id == "2000000000000000001" and context.application_id == APP
    assert context.token.startswith("aW50")
    assert (context.guild_id, context.channel_id, context.in_thread) == (GUILD, CHANNEL, False)
    assert context.channel_key == f"discord:{GUILD}:{CHANNEL}"
    assert context.delivery_id == "discord:interaction:2000000000000000001"
    assert (context.person.user_id, context.person.name) == (ADA, "Ada")
    assert context.person.role_ids == ("1600000000000000001",)
    assert context.timestamp == pytest.approx(snowflake_time("2000000000000000001"))


def test_ask_in_a_thread_names_the_thread_and_its_parent() -> None:
    found = parse_interaction(in_thread(ask()))
    assert isinstance(found, SlashCommand) and found.context.in_thread
    assert found.context.conversation_key == f"discord:{GUILD}:{THREAD}"
    assert found.context.channel_key == f"discord:{GUILD}:{CHANNEL}"


def test_ask_in_a_dm() -> None:
    found = parse_interaction(in_dm(ask()))
    assert isinstance(found, SlashCommand) and found.context.is_dm
    assert found.context.conversation_key == "discord:dm:1700000000000"
    assert found.context.person.role_ids == ()


def test_a_long_prompt_is_truncated_with_a_note_and_an_empty_one_ignored() -> None:
    found = parse_interaction(ask("x" * (MAX_PROMPT_CHARS + 10)))
    assert isinstance(found, SlashCommand) and found.truncated
    assert found.prompt.endswith(f"[message truncated to {MAX_PROMPT_CHARS} characters]")
    empty = parse_interaction(ask("   "))
    assert isinstance(empty, Ignored) and empty.reason is IgnoreReason.EMPTY
    assert isinstance(parse_interaction(command("ask")), Ignored)


@pytest.mark.parametrize("name", ["stop", "new", "usage", "reset"])
def test_simple_commands(name: str) -> None:
    found = parse_interaction(command(name))
    assert isinstance(found, SlashCommand) and found.name == name and found.prompt == ""


def test_teammate_config_carries_its_options() -> None:
    options = [
        {"name": "system_prompt", "type": 3, "value": "Be brief."},
        {"name": "model", "type": 3, "value": "claude-haiku-4-5"},
        {"name": "bash", "type": 5, "value": True},
        {"name": "budget", "type": 10, "value": 2.5},
    ]
    found = parse_interaction(
        command("teammate", [{"name": "config", "type": 1, "options": options}])
    )
    assert isinstance(found, SlashCommand) and found.name == "config"
    assert found.options == (
        ("system_prompt", "Be brief."),
        ("model", "claude-haiku-4-5"),
        ("bash", True),
        ("budget", 2.5),
    )
    bare = parse_interaction(command("teammate", [{"name": "config", "type": 1}]))
    assert isinstance(bare, SlashCommand) and bare.options == ()
    other = parse_interaction(command("teammate", [{"name": "wipe", "type": 1}]))
    assert isinstance(other, Ignored) and other.reason is IgnoreReason.UNKNOWN_COMMAND


def test_unknown_commands_and_interaction_types_are_ignored() -> None:
    unknown = parse_interaction(command("deploy"))
    assert isinstance(unknown, Ignored) and unknown.reason is IgnoreReason.UNKNOWN_COMMAND
    for kind in (1, 4, 5):
        found = parse_interaction(interaction({"name": "ask"}, kind=kind))
        assert isinstance(found, Ignored)
        assert found.reason is IgnoreReason.UNSUPPORTED_INTERACTION


def test_custom_ids_round_trip() -> None:
    assert stop_custom_id(42) == "stop:42"
    assert parse_custom_id(stop_custom_id(42)) == ("stop", 42, None)
    assert parse_custom_id(stop_custom_id(42, THREAD)) == ("stop", 42, THREAD)
    assert parse_custom_id(feedback_custom_id(7, "up")) == ("feedback", 7, "up")
    assert parse_custom_id(feedback_custom_id(7, "down")) == ("feedback", 7, "down")
    for junk in ("stop:", "stop:x", "stop:1:", "feedback:1:meh", "stop:1 ", 5, None, "s" * 200):
        assert parse_custom_id(junk) is None


def test_the_stop_button_names_its_run_and_conversation() -> None:
    found = parse_interaction(button(stop_custom_id(42, THREAD)))
    assert isinstance(found, ButtonPress) and found.action == "stop" and found.run_id == 42
    assert found.message_id == "1500000000000000009"
    # Pressed on an answer in the channel, it still names the thread's conversation.
    assert found.conversation_key == f"discord:{GUILD}:{THREAD}"
    plain = parse_interaction(in_thread(button(stop_custom_id(42))))
    assert isinstance(plain, ButtonPress) and plain.conversation_key == f"discord:{GUILD}:{THREAD}"


def test_feedback_buttons() -> None:
    up = parse_interaction(button(feedback_custom_id(9, "up")))
    down = parse_interaction(in_dm(button(feedback_custom_id(9, "down"))))
    assert isinstance(up, ButtonPress) and (up.action, up.run_id, up.vote) == ("feedback", 9, "up")
    assert isinstance(down, ButtonPress) and down.vote == "down" and down.context.is_dm


def test_other_components_are_ignored() -> None:
    found = parse_interaction(button("somebody-elses-button"))
    assert isinstance(found, Ignored) and found.reason is IgnoreReason.UNKNOWN_COMPONENT
    select = interaction({"custom_id": "stop:1", "component_type": 3, "values": []}, kind=3)
    found = parse_interaction(select)
    assert isinstance(found, Ignored) and found.reason is IgnoreReason.UNKNOWN_COMPONENT


@pytest.mark.parametrize(
    "payload",
    [
        None,
        {},
        ask(type="2"),
        ask(id=None),
        ask(application_id="app"),
        ask(token=""),
        ask(token=5),
        ask(token="t" * 2000),
        ask(token="tökén"),
        ask(guild_id="G"),
        ask(channel_id=None, channel=None),
        ask(member=None),
        ask(member={"user": {"id": "x"}}),
        {**ask(), "data": None},
        {**in_thread(ask()), "channel": {"id": THREAD, "type": 11}},
        {**in_dm(ask()), "channel": {"id": "1700000000000", "type": 0}},
        command("ask", [{"name": "prompt", "type": 3, "value": {"a": 1}}]),
        command("ask", [{"name": "prompt", "type": 3, "value": float("nan")}]),
        command("ask", {"prompt": "hi"}),  # type: ignore[arg-type]
        command("ask", ["prompt"]),  # type: ignore[list-item]
        command("ask", [{"name": "", "type": 3, "value": "x"}]),
        command("teammate", [{"name": "config", "type": 1}, {"name": "x", "type": 1}]),
        command("teammate", [{"name": "config", "type": 1, "options": "x"}]),
    ],
)
def test_malformed_interactions_are_ignored_as_malformed(payload: object) -> None:
    found = parse_interaction(payload)
    assert isinstance(found, Ignored) and found.reason is IgnoreReason.MALFORMED, found


def test_a_bot_pressing_a_button_is_ignored() -> None:
    found = parse_interaction(button("stop:1", member={"user": user(BOB, bot=True), "roles": []}))
    assert isinstance(found, Ignored) and found.reason is IgnoreReason.BOT_MESSAGE


# --- hostile input: the translators are total --------------------------------------------------

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
discord_keys = st.sampled_from(
    [
        "id", "type", "channel_id", "guild_id", "author", "member", "content", "mentions",
        "attachments", "webhook_id", "edited_timestamp", "message_reference",
        "referenced_message", "message_id", "bot", "username", "global_name", "nick", "roles",
        "filename", "url", "size", "content_type", "application_id", "data", "token",
        "channel", "parent_id", "user", "name", "options", "value", "custom_id",
        "component_type", "message",
    ]
)  # fmt: skip
discord_like = st.recursive(
    json_scalars
    | st.sampled_from([BOT, ADA, CHANNEL, f"<@{BOT}> hi", "stop:1", "ask", "teammate", 0, 2, 19]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(discord_keys, children, max_size=8)
    ),
    max_leaves=40,
)
odd_values = st.sampled_from([b"bytes", (1, 2), {1, 2}, frozenset({"a"}), object(), 10**400])
huge_text = st.builds(
    lambda unit, count: (unit or f"<@{BOT}>") * count,
    st.text(max_size=6),
    st.integers(MAX_TEXT_CHARS // 6, MAX_TEXT_CHARS * 3),
)


def assert_total(payload: object) -> None:
    for parent in (None, CHANNEL):
        found = parse_message(
            payload, bot_user_id=BOT, thread_parent=lambda _c, p=parent: p, known_thread=bool
        )
        assert isinstance(found, DiscordMessage | Ignored)
        if isinstance(found, DiscordMessage):
            # Never garbage: keys keep their shape, text is bounded, ids are snowflakes.
            assert len(found.text) <= MAX_TEXT_CHARS + 100
            assert found.conversation_key.count(":") == 2
            assert found.channel_key.count(":") == 2
            assert found.message_id.isdigit() and found.person.user_id.isdigit()
            assert found.person.user_id != BOT
            assert len(found.files) <= MAX_ATTACHMENTS
            assert found.text or found.files
    interaction_found = parse_interaction(payload)
    assert isinstance(interaction_found, SlashCommand | ButtonPress | Ignored)
    if isinstance(interaction_found, SlashCommand | ButtonPress):
        context = interaction_found.context
        assert context.conversation_key.count(":") == 2
        assert context.interaction_id.isdigit() and context.token
    if isinstance(interaction_found, SlashCommand):
        assert len(interaction_found.prompt) <= MAX_PROMPT_CHARS + 100
        assert interaction_found.name != "ask" or interaction_found.prompt


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(json_like | discord_like)
def test_arbitrary_json_like_payloads_never_raise(payload: object) -> None:
    assert_total(payload)


VALID = [
    message(),
    message(channel_id=THREAD, content="plain", mentions=[]),
    message(
        type=19,
        content="more",
        message_reference={"message_id": "1500000000000000000"},
        referenced_message=message(id="1500000000000000000", author=user(BOT)),
    ),
    dm_message(attachments=[ATTACHMENT]),
    ask(),
    in_thread(ask()),
    in_dm(command("stop")),
    command(
        "teammate",
        [{"name": "config", "type": 1, "options": [{"name": "m", "type": 3, "value": "x"}]}],
    ),
    button(stop_custom_id(3, THREAD)),
    in_dm(button(feedback_custom_id(3, "up"))),
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


@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID), st.data(), json_like | odd_values | huge_text, st.booleans())
def test_mutations_of_valid_payloads_never_raise(
    valid: dict[str, Any], data: st.DataObject, replacement: object, delete: bool
) -> None:
    payload: Any = copy.deepcopy(valid)
    path = data.draw(st.sampled_from(paths(payload)[1:]))
    parent = payload
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    assert_total(payload)


@pytest.mark.parametrize("valid", VALID)
def test_every_valid_sample_is_answered(valid: dict[str, Any]) -> None:
    # So the mutation test starts from payloads that reach the deepest branches.
    found_message = parse_message(
        valid,
        bot_user_id=BOT,
        thread_parent=lambda c: CHANNEL if c == THREAD else None,
        known_thread=lambda key: True,
    )
    found_interaction = parse_interaction(valid)
    assert not (isinstance(found_message, Ignored) and isinstance(found_interaction, Ignored)), (
        found_message,
        found_interaction,
    )


def test_a_deeply_nested_payload_is_just_malformed() -> None:
    deep: Any = {}
    for _ in range(50_000):
        deep = {"author": deep, "data": deep}
    assert isinstance(parse(deep), Ignored)
    assert isinstance(parse_interaction(deep), Ignored)


# --- what callers see in logs, and boundaries ---------------------------------------------------


def test_ignore_reasons_read_as_words_in_logs() -> None:
    assert [reason.value for reason in IgnoreReason] == [
        "malformed",
        "bot_message",
        "own_message",
        "webhook",
        "system_message",
        "edited",
        "empty",
        "mentions_someone_else",
        "not_addressed",
        "unsupported_interaction",
        "unknown_command",
        "unknown_component",
    ]


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (None, "payload"),
        (message(author="Ada"), "author"),
        (message(author={"id": "x"}), "author"),
        (message(type=[0]), "type"),
        (message(id=None), "id"),
        (message(channel_id="general"), "channel_id"),
        (message(guild_id=5), "guild_id"),
        (message(content=5), "content"),
        (message(attachments="a.txt"), "attachments"),
        (message(mentions={}), "mentions"),
    ],
)
def test_a_malformed_message_names_the_field(payload: object, detail: str) -> None:
    found = parse(payload)
    assert isinstance(found, Ignored) and (found.reason, found.detail) == (
        IgnoreReason.MALFORMED,
        detail,
    )


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (None, "payload"),
        (ask(type=None), "type"),
        (ask(id="x"), "id"),
        (ask(application_id=None), "application_id"),
        (ask(token=None), "token"),
        (ask(guild_id="x"), "guild_id"),
        (ask(channel_id=None, channel={}), "channel_id"),
        ({**in_thread(ask()), "channel": {"id": THREAD, "type": 12}}, "parent_id"),
        ({**in_dm(ask()), "channel": {"id": "1700000000000", "type": 0}}, "channel"),
        (ask(member=None), "member"),
        (ask(member={"roles": []}), "user"),
        (ask(member={"user": {"id": None}}), "user"),
        ({**ask(), "data": []}, "data"),
        (command("ask", "prompt"), "options"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_interaction_names_the_field(payload: object, detail: str) -> None:
    found = parse_interaction(payload)
    assert isinstance(found, Ignored) and (found.reason, found.detail) == (
        IgnoreReason.MALFORMED,
        detail,
    )


def test_an_interaction_without_a_channel_object_uses_its_channel_id() -> None:
    payload = ask()
    del payload["channel"]
    found = parse_interaction(payload)
    assert isinstance(found, SlashCommand) and found.context.channel_id == CHANNEL
    assert not found.context.in_thread


def test_token_and_option_name_bounds() -> None:
    assert isinstance(parse_interaction(ask(token="t")), SlashCommand)
    name_32 = [
        {"name": "n" * 32, "type": 3, "value": "x"},
        {"name": "prompt", "type": 3, "value": "y"},
    ]
    assert isinstance(parse_interaction(command("ask", name_32)), SlashCommand)
    name_33 = [{"name": "n" * 33, "type": 3, "value": "x"}]
    found = parse_interaction(command("ask", name_33))
    assert isinstance(found, Ignored) and found.reason is IgnoreReason.MALFORMED


def test_a_prompt_at_the_limit_is_kept_whole() -> None:
    found = parse_interaction(ask("p" * MAX_PROMPT_CHARS))
    assert isinstance(found, SlashCommand) and not found.truncated
    assert found.prompt == "p" * MAX_PROMPT_CHARS


def test_a_mention_is_named_by_the_guild_nickname_discord_sends_with_it() -> None:
    bob = {**user(BOB, global_name="Bob"), "member": {"nick": "Bobby", "roles": []}}
    found = message_of(message(content=f"<@{BOT}> ask <@{BOB}>", mentions=[user(BOT), bob]))
    assert found.text == "ask @Bobby"


def test_a_broken_attachment_does_not_hide_the_ones_after_it() -> None:
    found = message_of(dm_message(attachments=["junk", {"id": "x"}, ATTACHMENT]))
    assert [file.name for file in found.files] == ["notes.txt"]
