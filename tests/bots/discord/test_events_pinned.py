"""Discord payload translation, pinned where the main tests left room (issue 15's mutation
runs): which field a malformed `/teammate config` names, how much of a display name is read."""

from __future__ import annotations

from typing import Any

from bots.discord.events import MAX_NAME_CHARS, Ignored, IgnoreReason, parse_interaction
from tests.bots.discord.test_events import command, message, message_of, user


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
