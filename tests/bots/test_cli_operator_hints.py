"""What the commands tell an operator about setting them up (issue 28, Operator, item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from bots.cli import main
from bots.platform import ServeOptions
from bots.platforms.slack.platform import SlackPlatform
from bots.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("TEAMMATE_", "SLACK_", "DISCORD_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEAMMATE_DATA_DIR", str(tmp_path / "data"))


def test_serve_help_names_every_platform(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(Slack)" not in shown
    assert "Discord with DISCORD_BOT_TOKEN" in shown


def test_slack_with_only_the_bot_token_names_both_modes() -> None:
    settings = load_settings()
    settings.slack_bot_token = SecretStr("xoxb-1234567")
    with pytest.raises(SettingsError) as caught:
        SlackPlatform.require(settings, ServeOptions(http=False))
    message = str(caught.value)
    assert "SLACK_APP_TOKEN" in message
    assert "SLACK_SIGNING_SECRET" in message and "--http" in message


def test_discord_invite_without_a_token_suggests_the_application_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["discord", "invite"]) == 2
    error = capsys.readouterr().err
    assert "DISCORD_BOT_TOKEN is not set" in error
    assert "--application-id" in error
