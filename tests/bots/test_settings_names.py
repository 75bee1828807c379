"""What is not a setting is refused (issue 28): a misspelt key, section or TEAMMATE_* variable
is one line naming it, where it was written and the nearest setting, and nothing starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bots.settings import Settings, SettingsError, load_settings
from bots.settings_check import NOT_SETTINGS, unknown_variables
from tests.bots.settings_helpers import clean_environment, refused  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("clean_environment")


def test_a_misspelt_key_in_the_file_is_refused_naming_the_file_line_and_nearest(
    tmp_path: Path,
) -> None:
    message = refused(tmp_path, 'model = "scripted"\nsystem_promt = "We are the platform team."\n')
    assert message.startswith("teammate.toml, line 2: unknown setting `system_promt`")
    assert "did you mean `system_prompt`?" in message


def test_a_misspelt_section_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, "# limits\n\n[budget]\nchannel_usd_per_day = 5.0\n")
    assert message.startswith("teammate.toml, line 3: unknown section `[budget]`")
    assert "did you mean `[budgets]`?" in message


@pytest.mark.parametrize(
    ("text", "line", "key", "nearest"),
    [
        ("[slack]\nadmin = ['U1']\n", 2, "slack.admin", "slack.admins"),
        ("[discord]\nallowed_guild = [1]\n", 2, "discord.allowed_guild", "discord.allowed_guilds"),
        ("[tools.bash]\nsandbx = 'off'\n", 2, "tools.bash.sandbx", "tools.bash.sandbox"),
        (
            '[channels."slack:T1:C1"]\nsystem_promt = "terse"\n',
            2,
            'channels."slack:T1:C1".system_promt',
            'channels."slack:T1:C1".system_prompt',
        ),
        (
            "[mcp.servers.wiki]\nurl = 'https://wiki.internal/mcp'\ncall_timeout = 3\n",
            3,
            "mcp.servers.wiki.call_timeout",
            "mcp.servers.wiki.call_timeout_s",
        ),
        ("[budgets]\nchanel_usd_per_day = 5\n", 2, "budgets.chanel_usd_per_day", None),
    ],
)
def test_unknown_keys_in_nested_sections_are_refused(
    tmp_path: Path, text: str, line: int, key: str, nearest: str | None
) -> None:
    message = refused(tmp_path, text)
    assert message.startswith(f"teammate.toml, line {line}: unknown setting `{key}`")
    if nearest is not None:
        assert f"did you mean `{nearest}`?" in message


def test_several_unknown_keys_are_all_named_on_the_line(tmp_path: Path) -> None:
    message = refused(tmp_path, "system_promt = 'x'\n[budget]\nx = 1\n[tools.bash]\nsandbx = 1\n")
    assert message.startswith("teammate.toml, line 1: unknown setting `system_promt`")
    assert message.endswith("(and 2 more: `[budget]`, `tools.bash.sandbx`)")


def test_a_named_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "team.toml"
    config.write_text("max_turn = 3\n")
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config))
    with pytest.raises(SettingsError, match=rf"^{re.escape(str(config))}, line 1: unknown"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("TEAMMATE_SYSTEM_PROMT", "TEAMMATE_SYSTEM_PROMPT"),
        ("TEAMMATE_BUDGET__CHANNEL_USD_PER_DAY", "TEAMMATE_BUDGETS__CHANNEL_USD_PER_DAY"),
        ("TEAMMATE_BUDGETS__CHANEL_USD_PER_DAY", "TEAMMATE_BUDGETS__CHANNEL_USD_PER_DAY"),
        ("TEAMMATE_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
    ],
)
def test_an_unknown_teammate_variable_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, nearest: str
) -> None:
    monkeypatch.setenv(name, "5")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{name} (environment): not a setting")
    assert f"did you mean {nearest}?" in message
    assert "\n" not in message


def test_an_unknown_variable_in_dotenv_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TEAMMATE_MAX_TURN=3\n")
    with pytest.raises(SettingsError, match=r"^TEAMMATE_MAX_TURN \(\.env\): not a setting"):
        load_settings()


def test_variables_that_are_not_settings_but_are_used_are_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in NOT_SETTINGS:
        monkeypatch.setenv(name, "1")
    monkeypatch.delenv("TEAMMATE_CONFIG")
    # A variable an MCP server's env or headers names holds a credential, not a setting.
    (tmp_path / "teammate.toml").write_text(
        '[mcp.servers.github]\ncommand = ["gh-mcp"]\n'
        'env = { GITHUB_TOKEN = "TEAMMATE_GITHUB_TOKEN" }\n'
    )
    monkeypatch.setenv("TEAMMATE_GITHUB_TOKEN", "ghp-1234")
    monkeypatch.setenv("TEAMMATE_BUDGETS__CHANNEL_USD_PER_DAY", "2")
    monkeypatch.setenv("teammate_max_turns", "3")  # names are not case-sensitive
    settings = load_settings()
    assert settings.budgets.channel_usd_per_day == 2
    assert settings.max_turns == 3


def test_every_teammate_variable_the_code_reads_is_a_setting_or_known_not_to_be() -> None:
    read = set()
    for path in [*REPO.glob("*/**/*.py")]:
        if ".venv" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        read.update(re.findall(r"(?:getenv|environ\.get|environ\[)\(?\s*[\"'](TEAMMATE_\w+)", text))
    assert "TEAMMATE_CONFIG" in read
    settings_or_not = [
        name
        for name in read - set(NOT_SETTINGS)
        if unknown_variables(Settings, {name: ""}, "environment", set())
    ]
    assert settings_or_not == []
