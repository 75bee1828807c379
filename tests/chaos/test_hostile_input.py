"""Hostile input (issue 13), property-based: the settings loader, the Markdown splitter and the
Slack and Discord normalisers never crash and never turn garbage into something to answer.
(The normalisers' own totality properties live beside them in tests/bots/*/test_events.py;
these add the "no answer to garbage" side.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.platforms.discord.events import Ignored as DiscordIgnored
from bots.platforms.discord.events import parse_message
from bots.platforms.slack.events import Ignored as SlackIgnored
from bots.platforms.slack.events import parse_event
from bots.settings import Settings, SettingsError, load_settings
from bots.surface.markdown_split import split_markdown
from tests.bots.platforms.discord.test_events import json_like as discord_json
from tests.bots.platforms.slack.test_events import json_like as slack_json

# -- the settings loader ---------------------------------------------------------------------

TOML_PIECES = st.sampled_from(
    [
        "model",
        "max_turns",
        "tools",
        "bash_enabled",
        "[",
        "]",
        "[[",
        "]]",
        "{",
        "}",
        "=",
        '"',
        "'",
        "'''",
        '"""',
        ",",
        ".",
        "\n",
        " ",
        "#",
        "\\",
        "\\u0000",
        "\x00",
        "-1",
        "1e400",
        "nan",
        "inf",
        "99999999999999999999999",
        "true",
        "[budgets]",
        "[slack]",
        '[channels."slack:T:C"]',
        "channel_usd_per_day",
        "admins",
        "[discord]",
        "shard_count",
        "shard_ids",
        "data_dir",
        "😀",
        "\u202e",
        "\ud7ff",
        "0x",
        "1979-05-27",
    ]
)
toml_text = st.lists(TOML_PIECES | st.text(max_size=8), max_size=40).map("".join)


def _load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> Settings | str:
    config = tmp_path / "teammate.toml"
    config.write_bytes(content)
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)  # no stray .env
    try:
        return load_settings()
    except SettingsError as error:
        return str(error)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(toml_text)
def test_any_configuration_file_loads_or_fails_with_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    result = _load(tmp_path, monkeypatch, text.encode("utf-8", "surrogatepass"))
    if isinstance(result, str):
        assert "\n" not in result.strip() and "Traceback" not in result
        assert len(result) < 2_000


@pytest.mark.parametrize(
    "content",
    [
        b"a = " + b"[" * 100_000,  # nesting deeper than the parser's recursion
        b"x = " + b"{ a = " * 50_000,
        b"\xff\xfe not utf-8",
        b"model = '" + b"m" * 100_000 + b"'",  # a huge value
        b"system_prompt = '" + b"p" * 2_000_000 + b"'",
        b"max_turns = 99999999999999999999999999999999",
        b"[budgets]\nchannel_usd_per_day = nan",
        b"[discord]\nshard_ids = [" + b"1," * 10_000 + b"]",
    ],
    ids=[
        "deep-array",
        "deep-table",
        "not-utf8",
        "huge-model",
        "huge-prompt",
        "huge-int",
        "nan",
        "many-shards",
    ],
)
def test_malformed_or_oversized_files_are_one_line_naming_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    result = _load(tmp_path, monkeypatch, content)
    assert isinstance(result, str), "a hostile file must not configure anything"
    assert "\n" not in result and len(result) < 2_000


def test_a_malformed_environment_value_names_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMMATE_ALLOWED_USERS", "[not json")
    result = _load(tmp_path, monkeypatch, b"")
    assert isinstance(result, str)
    assert "allowed_users" in result.lower() and "configuration file" not in result


# -- the Markdown splitter -------------------------------------------------------------------

MD_PIECES = st.sampled_from(
    [
        "```",
        "```python",
        "~~~",
        "````",
        "`",
        "\n",
        "\n\n",
        " ",
        "  ",
        "# ",
        "- ",
        "> ",
        "|",
        "**",
        "_",
        "word",
        "longerword",
        "😀",
        "é",
        "\u200b",
        "\t",
        "<@U1>",
        "&lt;",
        "x" * 300,
    ]
)
markdown = st.lists(MD_PIECES | st.text(max_size=20), max_size=120).map("".join)
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*$")


def _content(text: str) -> str:
    """The text without fence characters and whitespace (a split closes and reopens fences
    and breaks long lines)."""
    return "".join(text.replace("`", "").replace("~", "").split())


def _is_subsequence(small: str, big: str) -> bool:
    rest = iter(big)
    return all(char in rest for char in small)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(markdown, st.integers(min_value=40, max_value=600))
def test_splitting_never_crashes_never_exceeds_the_limit_and_loses_no_text(
    text: str, limit: int
) -> None:
    parts = split_markdown(text, limit)
    assert all(len(part) <= limit for part in parts)
    said, shown = _content(text), _content("\n".join(parts))
    assert _is_subsequence(said, shown)  # nothing lost, in order
    # Nothing added but the info strings of reopened fences (`python`).
    longest_info = max(
        (len(line) for line in text.split("\n") if _FENCE_LINE.match(line)), default=0
    )
    assert len(shown) - len(said) <= len(parts) * longest_info


# -- the normalisers: garbage is never answered ----------------------------------------------


@settings(max_examples=300)
@given(slack_json)
def test_slack_garbage_is_ignored_not_answered(body: object) -> None:
    result = parse_event(body, bot_user_id="U0BOT", bot_id="B0BOT", known_thread=lambda _: True)
    assert isinstance(result, SlackIgnored)


@settings(max_examples=300)
@given(discord_json)
def test_discord_garbage_is_ignored_not_answered(payload: object) -> None:
    result = parse_message(payload, bot_user_id="1", known_thread=lambda _: True)
    assert isinstance(result, DiscordIgnored)
