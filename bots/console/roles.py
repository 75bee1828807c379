"""Who may use the console: admins change, viewers read, nobody else gets in.

Owns: `role_for` — admins are `[slack] admins` (Slack user ids), `[discord] admin_users`, or a
Discord member holding one of `[discord] admin_roles`; viewers are `[console] viewers`
(platform-qualified). The same lists decide in chat (`/teammate config`), so one person is an
admin everywhere or nowhere.

Must not: call a platform (sign-in hands over the Discord roles it read).
"""

from __future__ import annotations

from collections.abc import Collection

from bots.console.sessions import Role
from bots.settings import Settings


def role_for(
    settings: Settings, person: str, *, discord_roles: Collection[str] = ()
) -> Role | None:
    """`person` is platform-qualified (`slack:U0123`, `discord:1234`); None: refused."""
    platform, _, user_id = person.partition(":")
    if not user_id:
        return None
    if platform == "slack" and user_id in settings.slack.admins:
        return "admin"
    if platform == "discord":
        if user_id in settings.discord.admin_users:
            return "admin"
        if set(discord_roles) & set(settings.discord.admin_roles):
            return "admin"
    if person in settings.console.viewers:
        return "viewer"
    return None


def discord_role_guild(settings: Settings) -> str | None:
    """The guild whose roles `admin_roles` names: `[console] discord_guild_id`, else the dev
    guild, else the only allowed guild."""
    if settings.console.discord_guild_id:
        return settings.console.discord_guild_id
    if settings.discord.dev_guild_id:
        return settings.discord.dev_guild_id
    guilds = settings.discord.allowed_guilds
    return guilds[0] if len(guilds) == 1 else None
