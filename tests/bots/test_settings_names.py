"""What is not a setting is refused (issue 28): a misspelt key, section or TEAMMATE_* variable
is one line naming it, where it was written and the nearest setting, and nothing starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bots.settings_helpers import clean_environment, refused  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("clean_environment")
