"""Who may use Teammate on Discord, and who administers it.

Owns: `discord_refusal` (the guild, channel, role and user allow-lists of `[discord]`, and
DMs on or off) and `is_admin` (admins by user or role). Pure: the adapter passes what the
translated payload says (`bots.platforms.discord.events.Person` and where it was said) and, for a DM
under allow-lists, the person's roles in the guilds that admit people (`memberships`: looked
up by the adapter). The runner's own platform-neutral allow-lists (`bots.access`) apply on top,
on submit.

A DM is no way around the lists: a bot is public by default, so anyone can add it to a server
of their own and DM it. When any list is set, a DM is answered only for someone the lists
admit: on `allowed_users` or an admin, or a member of an admitting guild (an allowed guild, or
one holding an allowed channel, or with no guild or channel list any guild the bot is in) with
an allowed role (or any role, when no role or user list is set).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from bots.platforms.discord.events import Person
from bots.settings import DiscordSettings

DMS_OFF_TEXT = "Sorry, I don't answer direct messages here. Mention me in a channel instead."
GUILD_TEXT = "Sorry, I'm not enabled in this server."
CHANNEL_TEXT = "Sorry, I'm not enabled in this channel."
PERSON_TEXT = "Sorry, I'm not enabled for you. Ask an admin to add you or one of your roles."
DM_TEXT = (
    "Sorry, I answer direct messages only for members of the servers I'm enabled in. "
    "Mention me in one of their channels instead."
)
ADMIN_TEXT = (
    "Only Teammate's admins can see or change a channel's configuration "
    "(`[discord] admin_users` or `admin_roles` in the configuration file)."
)


def is_admin(config: DiscordSettings, person: Person) -> bool:
    return person.user_id in config.admin_users or any(
        role in config.admin_roles for role in person.role_ids
    )


def lists_restrict(config: DiscordSettings) -> bool:
    return bool(
        config.allowed_guilds
        or config.allowed_channels
        or config.allowed_roles
        or config.allowed_users
    )


def dm_needs_memberships(config: DiscordSettings, person: Person) -> bool:
    """Whether a DM from `person` is decided by their roles in the admitting guilds (the
    adapter then looks them up): lists are set and the person is not admitted by id."""
    return (
        config.allow_dms
        and lists_restrict(config)
        and person.user_id not in config.allowed_users
        and person.user_id not in config.admin_users
    )


def discord_refusal(
    config: DiscordSettings,
    person: Person,
    *,
    guild_id: str | None,
    channel_id: str,
    memberships: Mapping[str, Collection[str]] | None = None,
) -> str | None:
    """Why this person may not use Teammate here (`channel_id`: a thread's parent), or None.

    A person passes the person check by being an allowed user, having an allowed role (in a
    guild), or being an admin; with neither list set, everyone passes. A DM under lists is
    decided by `memberships` (guild id -> the person's role ids there, for the admitting
    guilds the adapter found them in; None or empty: a member of none)."""
    if guild_id is None:
        if not config.allow_dms:
            return DMS_OFF_TEXT
        if not dm_needs_memberships(config, person):
            return None
        for guild, roles in (memberships or {}).items():
            if config.allowed_guilds and guild not in config.allowed_guilds:
                continue
            member = Person(user_id=person.user_id, name=person.name, role_ids=tuple(roles))
            if _person_refusal(config, member, in_guild=True) is None:
                return None
        return DM_TEXT
    else:
        if config.allowed_guilds and guild_id not in config.allowed_guilds:
            return GUILD_TEXT
        if config.allowed_channels and channel_id not in config.allowed_channels:
            return CHANNEL_TEXT
    return _person_refusal(config, person, in_guild=guild_id is not None)


def _person_refusal(config: DiscordSettings, person: Person, *, in_guild: bool) -> str | None:
    if not (config.allowed_users or config.allowed_roles) or is_admin(config, person):
        return None
    if person.user_id in config.allowed_users:
        return None
    if in_guild and any(role in config.allowed_roles for role in person.role_ids):
        return None
    return PERSON_TEXT
