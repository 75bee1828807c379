"""What the settings tests share: an environment with no TEAMMATE_* variable and no stray
file, and the one line a refused configuration gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bots.settings import SettingsError, load_settings


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env or teammate.toml
    for name in list(os.environ):
        if name.upper().startswith("TEAMMATE_"):
            monkeypatch.delenv(name)


def refused(tmp_path: Path, text: str) -> str:
    (tmp_path / "teammate.toml").write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message
    return message
