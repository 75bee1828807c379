"""Threads on Discord as the bot's features start and name them.

Owns: starting a thread from a message (`thread_from`: named after its text; a re-delivered
message whose thread exists already gets that thread), a channel's title for the model
(`channel_title`), a message's thread parent and guild as ids, and the note shown when
Teammate may not start threads in a channel.

Must not: decide whether a thread is Teammate's (`bots.known_threads`), or touch the runner.
"""

from __future__ import annotations

from typing import Any

import discord

__all__ = ["NO_THREADS_TEXT", "channel_title", "guild_id_of", "thread_from", "thread_parent"]

THREAD_NAME_CHARS = 90
THREAD_EXISTS = 160004  # "A thread has already been created for this message"
NO_THREADS_TEXT = (
    "I can't start a thread here: I need the Create Public Threads permission in this channel."
)


async def thread_from(
    client: discord.Client, message: discord.Message | discord.PartialMessage, text: str
) -> discord.Thread:
    """A thread started from `message`, named after `text`. Raises `discord.Forbidden`
    without the permission (the caller says `NO_THREADS_TEXT`)."""
    name = " ".join(text.split())[:THREAD_NAME_CHARS] or "Teammate"
    try:
        return await message.create_thread(name=name)
    except discord.HTTPException as exc:
        if exc.code != THREAD_EXISTS:
            raise
        # Started already (a re-delivered message): a thread has its message's id.
        channel = client.get_channel(message.id) or await client.fetch_channel(message.id)
        assert isinstance(channel, discord.Thread)
        return channel


def guild_id_of(message: discord.Message) -> str | None:
    return str(message.guild.id) if message.guild is not None else None


def thread_parent(channel: object) -> str | None:
    """The parent channel's id when `channel` is a thread, else None."""
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id)
    return None


def channel_title(channel: Any) -> str | None:
    """`#name` of a named channel, for the model's context."""
    name = getattr(channel, "name", None)
    return f"#{name}" if isinstance(name, str) else None
