"""discord.py objects as the gateway payload shapes `bots.platforms.discord.events` translates, and
where discord.py connects.

Owns: `message_payload` and `interaction_payload` (the fields the translator reads, from
`discord.Message` and `discord.Interaction`), and `use_endpoints` (`DISCORD_API_URL` and
`DISCORD_GATEWAY_URL` applied to discord.py's process-wide URLs). No IO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import discord


def use_endpoints(api_url: str | None, gateway_url: str | None) -> Callable[[], None]:
    """Point discord.py at `DISCORD_API_URL` (REST, interaction callbacks and webhooks: one
    base, e.g. `https://discord.example/api/v10`) and `DISCORD_GATEWAY_URL` (the WebSocket);
    None keeps Discord's own. Both are process-wide in discord.py; the returned function puts
    back what was there."""
    import discord.gateway
    import discord.http
    import yarl

    saved_base = discord.http.Route.BASE
    saved_gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    if api_url:
        discord.http.Route.BASE = api_url.rstrip("/")
    if gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)

    def restore() -> None:
        discord.http.Route.BASE = saved_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = saved_gateway

    return restore


# -- discord.py objects as the payload shapes the translator reads ----------------------------


def message_payload(message: discord.Message) -> dict[str, Any]:
    """The gateway `MESSAGE_CREATE` shape of `message` (the fields the translator reads)."""
    author = message.author
    payload: dict[str, Any] = {
        "id": str(message.id),
        "type": message.type.value,
        "channel_id": str(message.channel.id),
        "author": _user(author),
        "content": message.content or _forwarded(message),
        "edited_timestamp": message.edited_at.isoformat() if message.edited_at else None,
        "mentions": [_user(user) for user in message.mentions],
        "attachments": [
            {
                "id": str(a.id),
                "filename": a.filename,
                "size": a.size,
                "url": a.url,
                "content_type": a.content_type,
            }
            for a in message.attachments
        ],
    }
    if message.guild is not None:
        payload["guild_id"] = str(message.guild.id)
    if isinstance(author, discord.Member):
        payload["member"] = {"nick": author.nick, "roles": [str(r.id) for r in author.roles[1:]]}
    if message.webhook_id is not None:
        payload["webhook_id"] = str(message.webhook_id)
    reference = message.reference
    if reference is not None and reference.message_id is not None:
        payload["message_reference"] = {"message_id": str(reference.message_id)}
        resolved = reference.resolved
        if isinstance(resolved, discord.Message):
            payload["referenced_message"] = {"author": {"id": str(resolved.author.id)}}
    return payload


def _forwarded(message: discord.Message) -> str:
    """A forwarded message's text: Discord sends the forward with empty `content` and the
    text in `message_snapshots`, so a message forwarded into the bot's DM read as empty."""
    texts = [snapshot.content for snapshot in message.message_snapshots if snapshot.content]
    return "\n\n".join(f"(forwarded message)\n{text}" for text in texts)


def interaction_payload(interaction: discord.Interaction[Any]) -> dict[str, Any]:
    """The gateway `INTERACTION_CREATE` shape of `interaction`."""
    payload: dict[str, Any] = {
        "id": str(interaction.id),
        "application_id": str(interaction.application_id),
        "type": interaction.type.value,
        "token": interaction.token,
        "channel_id": str(interaction.channel_id),
        "data": interaction.data,
    }
    channel = interaction.channel
    if channel is not None:
        parent = getattr(channel, "parent_id", None)
        payload["channel"] = {
            "id": str(channel.id),
            "type": getattr(channel.type, "value", None),
            "parent_id": str(parent) if parent is not None else None,
        }
    user = _user(interaction.user)
    if interaction.guild_id is not None:
        payload["guild_id"] = str(interaction.guild_id)
        member = interaction.user
        roles = [str(r.id) for r in member.roles[1:]] if isinstance(member, discord.Member) else []
        nick = member.nick if isinstance(member, discord.Member) else None
        payload["member"] = {"user": user, "roles": roles, "nick": nick}
    else:
        payload["user"] = user
    if interaction.message is not None:
        payload["message"] = {"id": str(interaction.message.id)}
    return payload


def _user(user: discord.abc.User) -> dict[str, Any]:
    return {
        "id": str(user.id),
        "username": user.name,
        "global_name": user.global_name,
        "bot": user.bot,
        "system": user.system,
    }
