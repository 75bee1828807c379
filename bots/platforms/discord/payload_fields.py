"""The fields every Discord payload shares, read safely: snowflakes, people, keys, and the
named reasons a payload is ignored.

Owns: `Person`, `Ignored` and `IgnoreReason`, `conversation_key`, `snowflake_time`, and the
readers `snowflake_id`, `clean_name` and `person_of` that `bots.platforms.discord.events` (messages)
and `bots.platforms.discord.interactions` (commands and buttons) both use. Pure: no IO; hostile
input gives None or a fallback, never an exception.

Keys (docs/architecture.md): a conversation is `discord:<guild_id>:<thread_id>` in a guild
and `discord:dm:<channel_id>` in a DM; a channel is `discord:<guild_id>:<channel_id>` (a
thread's parent) or `discord:dm:<channel_id>`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from core.messages import Author

__all__ = [
    "DM",
    "MAX_NAME_CHARS",
    "MAX_ROLES",
    "TRUNCATION_NOTE",
    "IgnoreReason",
    "Ignored",
    "Person",
    "clean_name",
    "conversation_key",
    "person_of",
    "snowflake_id",
    "snowflake_time",
]

MAX_NAME_CHARS = 80
MAX_ROLES = 250  # Discord's cap on roles in a guild
TRUNCATION_NOTE = "\n\n[message truncated to {limit} characters]"
DM = "dm"

# Snowflakes are decimal strings of a 64-bit integer. Anything else, a colon above all, would
# break the structure of our keys.
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
_DISCORD_EPOCH_MS = 1_420_070_400_000


class IgnoreReason(enum.StrEnum):
    MALFORMED = "malformed"
    BOT_MESSAGE = "bot_message"
    OWN_MESSAGE = "own_message"
    WEBHOOK = "webhook"
    SYSTEM_MESSAGE = "system_message"
    EDITED = "edited"
    EMPTY = "empty"
    MENTIONS_SOMEONE_ELSE = "mentions_someone_else"
    NOT_ADDRESSED = "not_addressed"
    UNSUPPORTED_INTERACTION = "unsupported_interaction"
    UNKNOWN_COMMAND = "unknown_command"
    UNKNOWN_COMPONENT = "unknown_component"


@dataclass(slots=True, frozen=True)
class Ignored:
    """Why a payload gets no answer. `detail` names a field, never payload text."""

    reason: IgnoreReason
    detail: str = ""


@dataclass(slots=True, frozen=True)
class Person:
    """Who sent a message or pressed a button: user id, the name people see, guild roles."""

    user_id: str
    name: str
    role_ids: tuple[str, ...]

    def author(self) -> Author:
        return Author(id=self.user_id, name=self.name)


def conversation_key(guild_id: str | None, channel_id: str) -> str:
    return f"discord:{guild_id or DM}:{channel_id}"


def snowflake_time(snowflake: str) -> float:
    """When a snowflake was made, in seconds since the Unix epoch (its top 42 bits)."""
    return ((int(snowflake) >> 22) + _DISCORD_EPOCH_MS) / 1000


def snowflake_id(value: object) -> str | None:
    if not isinstance(value, str) or not _SNOWFLAKE.fullmatch(value):
        return None
    return value if int(value) < 2**64 else None


def clean_name(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    name = " ".join(value[: MAX_NAME_CHARS * 4].split())[:MAX_NAME_CHARS]
    return name or None


def person_of(user: Mapping[object, object], member: object) -> Person:
    """Nickname in this guild, else the global display name, else the username."""
    user_id = snowflake_id(user.get("id")) or "0"
    nick = clean_name(member.get("nick")) if isinstance(member, Mapping) else None
    name = nick or clean_name(user.get("global_name")) or clean_name(user.get("username"))
    roles: tuple[str, ...] = ()
    if isinstance(member, Mapping):
        raw_roles = member.get("roles")
        if isinstance(raw_roles, list):
            roles = tuple(
                role for role in map(snowflake_id, raw_roles[:MAX_ROLES]) if role is not None
            )
    return Person(user_id=user_id, name=name or user_id, role_ids=roles)
