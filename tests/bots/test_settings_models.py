"""A retired model id in the configuration stops start-up with one line that says what to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("TEAMMATE_CONFIG", "TEAMMATE_MODEL", "TEAMMATE_DATA_DIR", "SLACK_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_a_retired_global_model_is_refused_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMMATE_MODEL", "claude-opus-4-1-20250805")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "model" in message and "claude-opus-4-1-20250805" in message
    assert "retired on 2026-08-05" in message and "claude-opus-5-5" in message


def test_a_retired_channel_model_is_refused_at_start_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "team.toml"
    config.write_text('[channels."slack:T1:C1"]\nmodel = "claude-sonnet-4-5"\n')
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config))
    with pytest.raises(SettingsError, match=r"claude-sonnet-4-5 was retired on 2026-11-30"):
        load_settings()


def test_deprecated_and_unknown_models_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deprecated still answers; unknown may be newer than this build (doctor warns about both).
    for model_id in ("claude-opus-4-5", "claude-future-9"):
        monkeypatch.setenv("TEAMMATE_MODEL", model_id)
        assert load_settings().model == model_id
