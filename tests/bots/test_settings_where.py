"""An invalid value is named where it was written (issue 28): the file, its line and the key
path as written for a value in teammate.toml; the variable for a value from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.settings import SettingsError, load_settings
from tests.bots.settings_helpers import clean_environment, refused  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_environment")


def test_a_bad_value_in_the_file_names_the_file_line_and_key(tmp_path: Path) -> None:
    message = refused(tmp_path, '# budgets\n\n[budgets]\nchannel_usd_per_day = "five"\n')
    assert message.startswith(
        "teammate.toml, line 4: budgets.channel_usd_per_day: Input should be a valid number"
    )
    assert "TEAMMATE_" not in message


def test_a_bad_value_in_a_channel_table_names_its_key_as_written(tmp_path: Path) -> None:
    message = refused(tmp_path, '[channels."slack:T1:C1"]\n\nmodel = 5\n')
    assert message.startswith(
        'teammate.toml, line 3: channels."slack:T1:C1".model: Input should be a valid string'
    )


def test_a_bad_top_level_value_names_its_line(tmp_path: Path) -> None:
    message = refused(tmp_path, 'model = "scripted"\nmax_turns = 0\n')
    assert message.startswith("teammate.toml, line 2: max_turns: Input should be greater")


def test_a_section_that_fails_as_a_whole_names_its_header(tmp_path: Path) -> None:
    message = refused(tmp_path, "[discord]\nshard_ids = [1]\n")
    assert message.startswith("teammate.toml, line 1: discord: Value error, shard_ids needs")


def test_a_value_from_the_environment_still_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "teammate.toml").write_text("[budgets]\nchannel_usd_per_day = 5\n")
    monkeypatch.setenv("TEAMMATE_BUDGETS__CHANNEL_USD_PER_DAY", "lots")
    with pytest.raises(SettingsError, match=r"^TEAMMATE_BUDGETS__CHANNEL_USD_PER_DAY: Input"):
        load_settings()


def test_a_toml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    message = refused(tmp_path, 'model = "scripted"\nmax_turns = \n')
    assert message.startswith("teammate.toml, line 2, column 13: not valid TOML: Invalid value")
