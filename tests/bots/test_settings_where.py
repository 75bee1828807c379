"""An invalid value is named where it was written (issue 28): the file, its line and the key
path as written for a value in teammate.toml; the variable for a value from the environment."""

from __future__ import annotations

import pytest

from tests.bots.settings_helpers import clean_environment, refused  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_environment")
