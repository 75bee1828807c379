"""The conversation runner every adapter shares (docs/architecture.md, "The runner").

Owns: the package's public names, re-exported: `ConversationRunner` (`bots.runner.public`, where
the parts are listed), `ConversationService` (what adapters may ask of the store), the result
types of `submit` and `stop`, and the user-facing texts adapters echo.

Must not: hold code; each part lives in the module that owns it.
"""

from bots.runner.public import ConversationRunner
from bots.runner.service import ConversationService
from bots.runner.shared import StopResult, SubmitResult
from bots.runner.texts import (
    DELIVERED_TEXT,
    LEASE_LOST_TEXT,
    OVERSIZED_TEXT,
    QUEUED_TEXT,
    RETIRED_MODEL_TEXT,
    STALE_STOP_TEXT,
)

__all__ = [
    "DELIVERED_TEXT",
    "LEASE_LOST_TEXT",
    "OVERSIZED_TEXT",
    "QUEUED_TEXT",
    "RETIRED_MODEL_TEXT",
    "STALE_STOP_TEXT",
    "ConversationRunner",
    "ConversationService",
    "StopResult",
    "SubmitResult",
]
