"""Who may use Teammate: the allow-lists.

Owns: `access_refusal`, the text a person or channel not on `allowed_users` /
`allowed_channels` is shown. Empty lists allow everyone.
"""

from __future__ import annotations

from bots.incoming import Incoming
from bots.settings import Settings


def access_refusal(settings: Settings, incoming: Incoming) -> str | None:
    """Why this person or channel may not use Teammate, or None if they may."""
    users = settings.allowed_users
    if users and incoming.author.id not in users:
        return "Sorry, I'm not enabled for you. Ask an admin to add you to `allowed_users`."
    channels = settings.allowed_channels
    platform = incoming.channel_key.split(":", 1)[0]
    if channels and incoming.channel_key not in channels and platform not in channels:
        return "Sorry, I'm not enabled in this channel (see `allowed_channels`)."
    return None
