"""The `[slack]` settings and per-channel follow-ups: defaults, TOML, environment, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.settings import ChannelConfig, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env or teammate.toml
    for name in ("TEAMMATE_CONFIG", "TEAMMATE_SLACK__ADMINS", "TEAMMATE_SLACK__COMMAND"):
        monkeypatch.delenv(name, raising=False)


def test_slack_defaults() -> None:
    slack = load_settings().slack
    assert slack.admins == []
    assert slack.dms_enabled is True
    assert slack.follow_ups is True
    assert slack.command == "/teammate"
    assert slack.usage_footer is False


def test_slack_settings_from_toml_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "team.toml"
    config.write_text(
        """
[slack]
admins = ["U1"]
dms_enabled = false
follow_ups = false
usage_footer = true

[channels."slack:T1:C1"]
follow_ups = true
"""
    )
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config))
    monkeypatch.setenv("TEAMMATE_SLACK__COMMAND", "/tm")
    settings = load_settings()
    assert settings.slack.admins == ["U1"]
    assert settings.slack.dms_enabled is False
    assert settings.slack.usage_footer is True
    assert settings.slack.command == "/tm"
    assert settings.follow_ups_for("slack:T1:C1") is True  # the channel says so
    assert settings.follow_ups_for("slack:T1:C2") is False  # the [slack] default
    assert settings.follow_ups_for("discord:G:C") is True  # not Slack's to decide


@pytest.mark.parametrize("command", ["teammate", "/Tm", "/a b", "/" + "x" * 40])
def test_a_slash_command_slack_would_refuse_is_named(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("TEAMMATE_SLACK__COMMAND", command)
    with pytest.raises(SettingsError, match="TEAMMATE_SLACK__COMMAND"):
        load_settings()


def test_stored_channel_configuration_round_trips_and_tolerates_damage() -> None:
    config = ChannelConfig(system_prompt="Be brief.", tools=("read",))
    assert config.to_stored() == {"system_prompt": "Be brief.", "tools": ["read"]}
    assert ChannelConfig.from_stored(config.to_stored()) == config
    assert ChannelConfig.from_stored(None) == ChannelConfig()
    assert ChannelConfig.from_stored({"tools": 3}) == ChannelConfig()
    assert ChannelConfig.from_stored({"model": "m", "future_field": 1}).model == "m"
