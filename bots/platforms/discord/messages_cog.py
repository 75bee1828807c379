"""Messages to Teammate on Discord: a mention opens a thread, messages in Teammate's threads
and DMs continue their conversation, `@Teammate stop` stops it.

Owns: `MessagesCog`, the `on_message` listener (translated by `bots.platforms.discord.events`
through `bots.platforms.discord.payloads`, so keys, filtering and bounds live in one pure place),
placing a thread or a reply that the process has not seen yet (`bots.known_threads`, asked once per
key), and the work behind a message after the gateway handed it over: the access check, a
stop, the thread started from a mention, the earlier messages of an existing thread
(backfill), the attachments, and the hand-over to the runner with its surface. A message
delivered twice is handed over once (`bots.delivery_dedup`).

Must not: touch storage or tools (the runner does), or answer anything but through the
runner and a surface (a stop's and a missing permission's one-line replies aside).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord.ext import commands

from bots.features.commands import CommandPlace
from bots.incoming import Attachment, BackfillMessage
from bots.platforms.discord.access import is_admin
from bots.platforms.discord.events import (
    MAX_ATTACHMENTS,
    DiscordFile,
    DiscordMessage,
    Ignored,
    IgnoreReason,
    ParsedMessage,
    conversation_key,
    parse_message,
)
from bots.platforms.discord.payloads import message_payload
from bots.platforms.discord.threads import (
    NO_THREADS_TEXT,
    channel_title,
    guild_id_of,
    thread_parent,
)
from core.messages import Author

if TYPE_CHECKING:
    from bots.platforms.discord.bot import TeammateBot

__all__ = ["MAX_ATTACHMENT_BYTES", "MAX_BACKFILL", "MessagesCog"]

log = logging.getLogger(__name__)

MAX_BACKFILL = 50  # earlier messages of an existing thread given to a new conversation
MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024
MAX_BACKFILL_CHARS = 4_000  # of each earlier message


class MessagesCog(commands.Cog, name="Messages"):
    def __init__(self, bot: TeammateBot) -> None:
        self.bot = bot

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        bot = self.bot
        if bot.user is None or bot.closing:
            return
        payload, parent = message_payload(message), thread_parent(message.channel)
        roles = [str(role.id)] if message.guild and (role := message.guild.self_role) else []

        def parse() -> ParsedMessage:  # its managed role too: `@Teammate` may name either
            return parse_message(
                payload,
                bot_user_id=str(bot.user.id) if bot.user else "",
                thread_parent=lambda _channel_id: parent,
                known_thread=bot.known.__contains__,
                bot_role_ids=roles,
            )

        parsed = parse()
        unaddressed = isinstance(parsed, Ignored) and parsed.reason is IgnoreReason.NOT_ADDRESSED
        if unaddressed and await self._ours_after_all(message, parent):
            parsed = parse()
        if isinstance(parsed, Ignored):
            log.debug("message %s ignored: %s", message.id, parsed.reason)
            return
        bot.spawn(self._handle_once(message, parsed))

    async def _ours_after_all(self, message: discord.Message, parent: str | None) -> bool:
        """Whether a message in a thread, or a reply, belongs to a conversation of ours that
        this process has not seen yet (from before a restart). A plain channel message costs
        nothing."""
        keys: list[str] = []
        if parent is not None:
            keys.append(conversation_key(guild_id_of(message), str(message.channel.id)))
        reference = message.reference
        if reference is not None and reference.message_id is not None:
            keys.append(conversation_key(guild_id_of(message), str(reference.message_id)))
        found = False
        for key in keys:
            found = await self.bot.known.ask(key) or found
        return found

    async def _handle_once(self, message: discord.Message, parsed: DiscordMessage) -> None:
        """A gateway re-delivery seen lately is dropped (the runner's claim is the durable
        one; this only spares a second thread)."""
        async with self.bot.deliveries.first(parsed.delivery_id) as first:
            if first:
                await self._answer_message(message, parsed)

    async def _answer_message(self, message: discord.Message, parsed: DiscordMessage) -> None:
        bot = self.bot
        refusal = await bot.memberships.refusal_for(
            parsed.person, guild_id=parsed.guild_id, channel_id=parsed.parent_channel_id
        )
        if refusal is not None:
            # Ignored without a word: only slash commands get a (private) note.
            log.info("ignored %s in %s: %s", parsed.person.user_id, parsed.channel_key, refusal)
            return
        key = parsed.conversation_key
        if parsed.stop_requested:
            place = CommandPlace(
                parsed.channel_key, key, parsed.person.author(), is_admin(bot.config, parsed.person)
            )
            await message.reply(await bot.channel_commands.stop(place))
            return
        thread: discord.abc.MessageableChannel = message.channel
        if parsed.opens_thread and isinstance(message.channel, discord.TextChannel):
            try:  # a voice or stage channel's text chat has no threads: answered in place
                thread = await bot.thread_from(message, parsed.text or "a question")
            except discord.Forbidden:
                log.warning("no permission to create threads in %s", parsed.channel_key)
                await message.reply(NO_THREADS_TEXT, mention_author=False)
                return
        backfill: tuple[BackfillMessage, ...] = ()
        if await self._is_new_thread_conversation(parsed):
            backfill = await self._backfill(message)
        bot.known.remember(key)
        attachments = await _download(message, parsed.files)
        incoming = parsed.to_incoming(
            attachments=attachments, backfill=backfill, title=channel_title(message.channel)
        )
        surface = bot.surface(
            thread,
            channel_id=thread.id,
            conversation_channel_id=parsed.thread_id,
            reply_to=message,
        )
        await bot.runner.submit(incoming, surface)

    async def _is_new_thread_conversation(self, parsed: DiscordMessage) -> bool:
        """A mention in an existing thread that has no conversation yet: worth a backfill."""
        if not parsed.mentioned or parsed.is_dm or parsed.opens_thread:
            return False
        key = parsed.conversation_key
        return key not in self.bot.known and not await self.bot.runner.conversations.known(key)

    async def _backfill(self, message: discord.Message) -> tuple[BackfillMessage, ...]:
        """The thread's earlier messages, oldest first (bounded), for a new conversation."""
        earlier: list[BackfillMessage] = []
        me = self.bot.user.id if self.bot.user is not None else None
        async for previous in message.channel.history(limit=MAX_BACKFILL, before=message):
            if not previous.content.strip():
                continue
            earlier.append(
                BackfillMessage(
                    author=Author(id=str(previous.author.id), name=previous.author.display_name),
                    text=previous.content[:MAX_BACKFILL_CHARS],
                    timestamp=previous.created_at.timestamp(),
                    platform_message_id=str(previous.id),
                    from_assistant=previous.author.id == me,
                )
            )
        return tuple(reversed(earlier))


async def _download(
    message: discord.Message, files: tuple[DiscordFile, ...]
) -> tuple[Attachment, ...]:
    """The message's files the translator kept, within `MAX_ATTACHMENT_BYTES` each."""
    wanted = {file.id: file for file in files}
    found: list[Attachment] = []
    for attachment in message.attachments[:MAX_ATTACHMENTS]:
        file = wanted.get(str(attachment.id))
        if file is None or attachment.size > MAX_ATTACHMENT_BYTES:
            continue
        try:
            data = await attachment.read()
        except discord.HTTPException:
            log.warning("attachment %s could not be downloaded", attachment.id)
            continue
        mime_type = file.content_type.split(";", 1)[0].strip() or "application/octet-stream"
        found.append(Attachment(name=file.name, mime_type=mime_type, data=data))
    return tuple(found)
