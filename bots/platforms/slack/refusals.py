"""What Teammate refuses in Slack before the runner sees a message, and what it says.

Owns: the texts for a person of another organisation and for files that cannot be opened, and
the rule for other organisations (`external_refusal`: `[slack] external_teams`). Pure.
"""

from __future__ import annotations

UNREADABLE_TEXT = (
    "I can't open the file you shared (files from another organisation, or ones Slack keeps "
    "back, can't be read by apps). Paste its text, or describe what you need."
)
EXTERNAL_TEXT = (
    "Sorry, I answer only people of the workspace that runs me. "
    "Its admins can let your organisation in ([slack] external_teams)."
)


def external_refusal(allowed: list[str], external_team: str | None) -> str | None:
    """Why a person of another organisation may not use Teammate here, or None."""
    if external_team is None or "*" in allowed or external_team in allowed:
        return None
    return EXTERNAL_TEXT
