"""The messages a Discord surface posts and edits (part of `bots.platforms.discord.surface`).

Owns: `Posted` (a message, what this surface last wrote in it, whether it carries buttons) and
its two kinds: `BotMessage`, edited with the bot token, and `InteractionResponse`, an `/ask`'s
original response, edited through the interaction's token while that token lives. An edit that
can no longer be made returns False, so the surface shows the content anew with the bot token.
Also `Poster` (posting with the bot token, mentioning no one unless told), `show_with_file`
(a message edited, or posted, to hold a file) and `Typing` (the typing indicator while a run
works). Every send and edit with the bot token waits its turn in
the channel's lane of the bot's `ChannelPacer` (Discord's 5 writes per 5 s per channel).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import io
import logging
from collections.abc import Callable
from typing import Any

import discord

from bots.platforms.discord.pacing import ChannelPacer

log = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
_INVALID_TOKEN_CODES = frozenset({50027, 10015})  # invalid webhook token, unknown webhook


def token_refused(exc: discord.HTTPException) -> bool:
    """Discord refused an interaction's token (expired, or the webhook is gone)."""
    return exc.status == 401 or exc.code in _INVALID_TOKEN_CODES


class Posted(abc.ABC):
    """A message this surface posted and may edit. `edit` returns False when it can no
    longer edit it (an interaction token that expired or was refused)."""

    def __init__(self, message_id: int, content: str = "") -> None:
        self.id = message_id
        self.content = content
        self.has_view = False

    @abc.abstractmethod
    async def edit(self, **fields: Any) -> bool: ...

    async def current_content(self) -> str | None:
        """What the message shows now, as Discord says (None: can't tell)."""
        return None

    async def delete(self) -> bool:
        """Remove it; False if it could not be."""
        return False


class BotMessage(Posted):
    def __init__(
        self,
        message: discord.Message | discord.PartialMessage,
        content: str,
        pacer: ChannelPacer | None = None,
    ) -> None:
        super().__init__(message.id, content)
        self._message = message
        self._pacer = pacer or ChannelPacer()

    async def edit(self, **fields: Any) -> bool:
        try:
            async with self._pacer.write(channel_id_of(self._message.channel)):
                await self._message.edit(**fields)
        except (discord.NotFound, discord.Forbidden):
            return False  # deleted, or not ours to edit: the caller shows it anew
        return True

    async def current_content(self) -> str | None:
        try:
            return (await self._message.fetch()).content
        except discord.HTTPException:
            return None

    async def delete(self) -> bool:
        try:
            await self._message.delete()
        except discord.NotFound:
            return True  # gone already
        except discord.HTTPException:
            log.warning("could not delete a stale part of an answer")
            return False
        return True


class InteractionResponse(Posted):
    """The `/ask` interaction's original response, editable through its token while alive."""

    def __init__(
        self,
        interaction: discord.Interaction[Any],
        message_id: int,
        content: str,
        alive: Callable[[], bool],
    ) -> None:
        super().__init__(message_id, content)
        self._interaction = interaction
        self._alive = alive

    async def edit(self, **fields: Any) -> bool:
        if not self._alive():
            return False
        try:
            await self._interaction.edit_original_response(**fields)
        except discord.HTTPException as exc:
            if token_refused(exc):
                return False
            raise
        return True


def partial_message(channel: discord.abc.Messageable, message_id: int) -> discord.PartialMessage:
    """A message of `channel` addressed by id alone (one shown by an earlier process)."""
    get = getattr(channel, "get_partial_message", None)
    if get is None:
        raise TypeError("this channel cannot address a message by id")
    message: discord.PartialMessage = get(message_id)
    return message


class Poster:
    """Posts with the bot token in the conversation's channel, paced by `pacer`; `last_sent`
    is the newest."""

    def __init__(self, channel: discord.abc.Messageable, pacer: ChannelPacer | None = None) -> None:
        self._channel = channel
        self.pacer = pacer or ChannelPacer()
        self.last_sent: int | None = None

    async def send(
        self,
        content: str,
        *,
        view: discord.ui.View | None = None,
        embed: discord.Embed | None = None,
        files: list[discord.File] | None = None,
        allowed_mentions: discord.AllowedMentions = NO_MENTIONS,
    ) -> Posted:
        kwargs: dict[str, Any] = {"allowed_mentions": allowed_mentions}
        if content:
            kwargs["content"] = content
        if view is not None:
            kwargs["view"] = view
        if embed is not None:
            kwargs["embed"] = embed
        if files:
            kwargs["files"] = files
        async with self.pacer.write(channel_id_of(self._channel)):
            message = await self._channel.send(**kwargs)
        self.last_sent = message.id
        posted = BotMessage(message, content, self.pacer)
        posted.has_view = view is not None
        return posted


class Typing:
    """The channel's typing indicator, from `start` until `stop`."""

    def __init__(self, channel: discord.abc.Messageable) -> None:
        self._channel = channel
        self._task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._type(), name="discord-typing")

    async def stop(self) -> None:
        self._stopped.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _type(self) -> None:
        try:
            async with self._channel.typing():
                await self._stopped.wait()
        except discord.HTTPException:
            log.info("the typing indicator failed; the answer is not affected")


async def show_with_file(
    posted: Posted | None, poster: Poster, content: str, filename: str, data: bytes
) -> Posted:
    """`content` with `data` attached as `filename`, in `posted` (edited: its attachments
    replaced) or, when there is none or it can no longer be edited, in a new message. The
    message that shows it."""
    if posted is not None and await posted.edit(
        content=content,
        attachments=[discord.File(io.BytesIO(data), filename=filename)],
        allowed_mentions=NO_MENTIONS,
    ):
        posted.content = content
        return posted
    return await poster.send(content, files=[discord.File(io.BytesIO(data), filename=filename)])


def channel_id_of(channel: object) -> int | None:
    channel_id = getattr(channel, "id", None)
    return channel_id if isinstance(channel_id, int) else None
