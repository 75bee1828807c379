"""`[console]`: where the console listens and who may see what (`TEAMMATE_CONSOLE__...`).

Owns: `ConsoleSettings` and the rule that a console reachable from other machines needs a
sign-in provider (`require_safe_host`). The sign-in credentials themselves are top-level
secrets (`SLACK_CLIENT_ID`/`SLACK_CLIENT_SECRET`, `DISCORD_CLIENT_ID`/`DISCORD_CLIENT_SECRET`).

Must not: import `bots.settings` (which imports this).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, StringConstraints

DEFAULT_CONSOLE_PORT = 8750


def _text_id(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


# A platform-qualified person: `slack:U0123`, `discord:123456789`.
PersonKey = Annotated[
    str,
    BeforeValidator(_text_id),
    StringConstraints(pattern=r"^(slack:[A-Z0-9]{1,32}|discord:[0-9]{1,20})$"),
]


class ConsoleSettings(BaseModel):
    """The web console served by `teammate serve` and `teammate console`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # `teammate serve` serves it (on `host`:`port`)
    host: str = Field(default="127.0.0.1", min_length=1, max_length=255)
    port: int = Field(default=DEFAULT_CONSOLE_PORT, ge=0, le=65535)
    # Read-only people, platform-qualified (`slack:U0123`, `discord:1234`). Admins come from
    # `[slack] admins` and `[discord] admin_users` / `admin_roles`.
    viewers: list[PersonKey] = Field(default_factory=list)
    # Direct messages' text is hidden unless this is on (counts and cost are always shown).
    show_direct_messages: bool = False
    # The address people open (`https://teammate.example.com`), for sign-in redirects and
    # one-time links; empty: `http://host:port`.
    public_url: str = Field(default="", max_length=500, pattern=r"^(https?://[^\s/?#]+/?)?$")
    # Signs session cookies. Empty: one is generated and kept in the database, so every
    # instance of a shared database signs alike.
    session_secret: SecretStr | None = None
    # The guild whose roles decide `[discord] admin_roles` at sign-in (default: the dev guild,
    # else the only allowed guild).
    discord_guild_id: Annotated[
        str | None, BeforeValidator(_text_id), StringConstraints(pattern=r"^[0-9]{1,20}$")
    ] = None
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_safe_host(host: str, *, sign_in_configured: bool) -> str | None:
    """A problem text when the console would listen beyond this machine with nobody able to
    sign in properly (only one-time links), else None."""
    if is_loopback(host) or sign_in_configured:
        return None
    return (
        f"[console] host = {host!r} would open the console to other machines, but no sign-in "
        "is configured: set SLACK_CLIENT_ID and SLACK_CLIENT_SECRET, or DISCORD_CLIENT_ID and "
        "DISCORD_CLIENT_SECRET (or keep host = 127.0.0.1)"
    )
