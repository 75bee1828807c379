"""What the runner says to people, word for word.

Owns: the user-facing texts of the runner (queued, delivered, too long, stale stop, retired
model, lease lost). Adapters that echo them (a Stop button on a finished run, a surface that
recognises an acknowledgement) import them from `bots.runner`.

Must not: hold platform markup (surfaces frame these), or decide when a text is shown.
"""

from __future__ import annotations

__all__ = [
    "DELIVERED_TEXT",
    "LEASE_LOST_TEXT",
    "OVERSIZED_TEXT",
    "QUEUED_TEXT",
    "RETIRED_MODEL_TEXT",
    "STALE_STOP_TEXT",
    "SUMMARISING_TEXT",
]

QUEUED_TEXT = "Got it. I'm still working on an earlier message here; I'll read this one next."
DELIVERED_TEXT = "I've read this and I'm taking it into account."
OVERSIZED_TEXT = (
    "This message is too long for the model (about {tokens:,} tokens; it reads at most about "
    "{room:,} at once), so I haven't read it. Send a shorter message, or attach the text as "
    "a file and ask about it."
)
STALE_STOP_TEXT = "That answer has already finished; nothing was stopped."
RETIRED_MODEL_TEXT = (
    "This channel's model {model} was retired on {date} and no longer answers, so I'm using "
    "{fallback}. An admin can choose another with `/teammate config model`."
)
LEASE_LOST_TEXT = "Another Teammate instance took over this conversation."
SUMMARISING_TEXT = "This conversation got long; summarising it."
