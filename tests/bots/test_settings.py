"""Configuration from the environment, .env and TOML; errors as one line naming the setting."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bots.errors import RedactSecrets, install_redaction
from bots.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env or teammate.toml
    for name in ("TEAMMATE_CONFIG", "TEAMMATE_MODEL", "TEAMMATE_DATA_DIR", "SLACK_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_every_setting_has_a_safe_default() -> None:
    settings = load_settings()
    assert settings.data_dir == Path("data")
    assert settings.database_path == Path("data/teammate.db")
    assert settings.tools.bash_enabled is False
    assert settings.budgets.channel_usd_per_day is None
    assert settings.anthropic_api_key is None


def test_environment_and_toml_combine_with_environment_winning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "team.toml"
    config.write_text(
        """
model = "claude-haiku-4-5"
max_turns = 12
system_prompt = "We are the platform team."

[budgets]
channel_usd_per_day = 5.0

[tools]
bash_enabled = true

[channels."slack:T1:C1"]
system_prompt = "This is #ops: be terse."
model = "claude-opus-4-6"

[channels.discord.tools]
enabled = ["read", "ls"]
"""
    )
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config))
    monkeypatch.setenv("TEAMMATE_MAX_TURNS", "30")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-123456")
    settings = load_settings()
    assert settings.model == "claude-haiku-4-5"
    assert settings.max_turns == 30  # the environment wins over the file
    assert settings.budgets.channel_usd_per_day == 5.0
    assert settings.tools.bash_enabled is True
    assert settings.model_for("slack:T1:C1") == "claude-opus-4-6"
    assert settings.model_for("slack:T1:C2") == "claude-haiku-4-5"
    assert settings.channel("slack:T1:C1").system_prompt == "This is #ops: be terse."
    assert settings.tools_for("discord:G1:C9").enabled == ["read", "ls"]
    assert settings.tools_for("slack:T1:C1").bash_enabled is True
    assert settings.require("anthropic_api_key") == "sk-ant-test-123456"
    assert "sk-ant-test-123456" not in repr(settings)


def test_dotenv_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "TEAMMATE_MODEL=claude-haiku-4-5\nSLACK_BOT_TOKEN=xoxb-1234567\n"
    )
    settings = load_settings()
    assert settings.model == "claude-haiku-4-5"
    assert settings.require("slack_bot_token") == "xoxb-1234567"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("TEAMMATE_MAX_TURNS", "lots", "TEAMMATE_MAX_TURNS: Input should be a valid integer"),
        (
            "TEAMMATE_MAX_TURNS",
            "0",
            "TEAMMATE_MAX_TURNS: Input should be greater than or equal to 1",
        ),
        ("TEAMMATE_THINKING", "maybe", "TEAMMATE_THINKING: Input should be 'off' or 'adaptive'"),
        ("TEAMMATE_BUDGETS__USER_USD_PER_DAY", "-1", "TEAMMATE_BUDGETS__USER_USD_PER_DAY: Input"),
    ],
)
def test_an_invalid_setting_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_missing_config_file_and_bad_toml_are_clear(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TEAMMATE_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(SettingsError, match=r"TEAMMATE_CONFIG names .*missing\.toml"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("model = \n")
    monkeypatch.setenv("TEAMMATE_CONFIG", str(broken))
    with pytest.raises(SettingsError, match=r"broken\.toml, line 1, column 9: not valid TOML"):
        load_settings()


def test_a_missing_secret_names_its_variable() -> None:
    with pytest.raises(SettingsError, match=r"^SLACK_BOT_TOKEN is not set"):
        load_settings().require("slack_bot_token")


def test_secrets_never_reach_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-ant-api03-very-secret-value"
    redactor = RedactSecrets([secret])
    logger = logging.getLogger("teammate.test")
    caplog.handler.addFilter(redactor)
    try:
        try:
            raise RuntimeError(f"request failed with key {secret}")
        except RuntimeError:
            logger.exception("calling the model with %s failed", secret)
    finally:
        caplog.handler.removeFilter(redactor)
    assert secret not in caplog.text
    assert "[redacted]" in caplog.text
    assert install_redaction([]) is not None
