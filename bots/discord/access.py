"""Who may use Teammate on Discord, and who administers it.

Owns: `discord_refusal` (the guild, channel, role and user allow-lists of `[discord]`, and
DMs on or off) and `is_admin` (admins by user or role). Pure: the adapter passes what the
translated payload says (`bots.discord.events.Person` and where it was said). The runner's own
platform-neutral allow-lists (`bots.access`) apply on top, on submit.
"""

from __future__ import annotations

from bots.discord.events import Person
from bots.settings import DiscordSettings

DMS_OFF_TEXT = "Sorry, I don't answer direct messages here. Mention me in a channel instead."
GUILD_TEXT = "Sorry, I'm not enabled in this server."
CHANNEL_TEXT = "Sorry, I'm not enabled in this channel."
PERSON_TEXT = "Sorry, I'm not enabled for you. Ask an admin to add you or one of your roles."
ADMIN_TEXT = "Only Teammate's admins can change its configuration."


def is_admin(config: DiscordSettings, person: Person) -> bool:
    return person.user_id in config.admin_users or any(
        role in config.admin_roles for role in person.role_ids
    )


def discord_refusal(
    config: DiscordSettings,
    person: Person,
    *,
    guild_id: str | None,
    channel_id: str,
) -> str | None:
    """Why this person may not use Teammate here (`channel_id`: a thread's parent), or None.

    A person passes the person check by being an allowed user, having an allowed role (in a
    guild), or being an admin; with neither list set, everyone passes."""
    if guild_id is None:
        if not config.allow_dms:
            return DMS_OFF_TEXT
    else:
        if config.allowed_guilds and guild_id not in config.allowed_guilds:
            return GUILD_TEXT
        if config.allowed_channels and channel_id not in config.allowed_channels:
            return CHANNEL_TEXT
    if not (config.allowed_users or config.allowed_roles) or is_admin(config, person):
        return None
    if person.user_id in config.allowed_users:
        return None
    if guild_id is not None and any(role in config.allowed_roles for role in person.role_ids):
        return None
    return PERSON_TEXT
