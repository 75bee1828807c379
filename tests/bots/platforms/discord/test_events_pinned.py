"""Discord payload translation, pinned where the main tests left room (issue 15's mutation
runs): which field a malformed `/teammate config` names, how much of a display name is read."""

from __future__ import annotations

from typing import Any

from bots.platforms.discord.events import (
    MAX_NAME_CHARS,
    ButtonPress,
    Ignored,
    IgnoreReason,
    SlashCommand,
    feedback_custom_id,
    parse_interaction,
)
from tests.bots.platforms.discord.test_events import (
    CHANNEL,
    GUILD,
    ask,
    button,
    command,
    message,
    message_of,
    user,
)


def test_a_teammate_config_with_broken_options_names_the_options() -> None:
    # the group's subcommand is there, but its own options are not a list of options
    for broken in ("model=x", [{"type": 3, "value": "x"}], ["model"]):
        found = parse_interaction(
            command("teammate", [{"name": "config", "type": 1, "options": broken}])
        )
        assert found == Ignored(IgnoreReason.MALFORMED, "options")
    # no single subcommand at all
    groups: list[list[Any]] = [[], [{"name": "config", "type": 1}] * 2, ["config"]]
    for group in groups:
        found = parse_interaction(command("teammate", group))
        assert found == Ignored(IgnoreReason.MALFORMED, "options")


def test_a_display_name_is_read_only_within_its_first_320_characters() -> None:
    # hostile input stays cheap: a "name" of blank padding is no name, whatever follows it
    padded = " " * (4 * MAX_NAME_CHARS) + "Mallory"
    found = message_of(message(author=user(global_name=padded, username="ada")))
    assert found.person.name == "ada"
    found = message_of(message(author=user(global_name=" " * 300 + "Mallory", username="ada")))
    assert found.person.name == "Mallory"


def test_an_interaction_naming_its_channel_only_inside_channel_is_still_placed() -> None:
    payload = ask()
    del payload["channel_id"]
    found = parse_interaction(payload)
    assert isinstance(found, SlashCommand)
    assert found.context.channel_key == f"discord:{GUILD}:{CHANNEL}"


def test_a_command_in_a_channel_under_a_category_belongs_to_that_channel() -> None:
    # A text channel in a category has the category as its `parent_id`: it is no thread.
    category = "1300000000000000555"
    channel = {"id": CHANNEL, "type": 0, "guild_id": GUILD, "parent_id": category}
    found = parse_interaction(ask(channel=channel))
    assert isinstance(found, SlashCommand) and not found.context.in_thread
    assert found.context.channel_key == f"discord:{GUILD}:{CHANNEL}"
    assert found.context.conversation_key == f"discord:{GUILD}:{CHANNEL}"


def test_a_feedback_press_names_the_message_it_was_on() -> None:
    found = parse_interaction(button(feedback_custom_id(9, "up")))
    assert isinstance(found, ButtonPress) and found.message_id == "1500000000000000009"
