"""`/ask` on Discord: a question asked with a slash command, answered in a thread started
from its response.

Owns: `AskCog`, the `/ask` command: the access check, writing the interaction down before
the defer (the defer is its ack, and the conversation's key is the thread started from that
response, so the question cannot be stored before it: docs/architecture.md, "Before the
accept"), the defer, the thread, and the hand-over to the runner; and `replay_ask`, an `/ask`
a crashed process deferred and had not stored, answered in its "thinking…" response. The
journal itself is the bot's (`TeammateBot.journal`: opened, adopted and closed with it).

Must not: touch storage or tools (the runner does).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.ext import commands

from bots.incoming import Incoming
from bots.journal import Replay
from bots.platforms.discord.events import SlashCommand, conversation_key, parse_interaction
from bots.platforms.discord.payloads import interaction_payload
from bots.platforms.discord.threads import NO_THREADS_TEXT, channel_title

if TYPE_CHECKING:
    from bots.platforms.discord.bot import TeammateBot

__all__ = ["ASK_JOURNAL_DIR", "UNREADABLE_COMMAND_TEXT", "AskCog"]

log = logging.getLogger(__name__)

ASK_JOURNAL_DIR = "discord-asks"  # in the data directory
ASK = "ask"  # the journal's kind
ASK_JOURNAL_MAX_WAIT_S = 1.5  # of Discord's 3 s before the defer; past it, answered unjournaled
RESTARTING_TEXT = "I'm restarting; ask again in a minute."
UNREADABLE_COMMAND_TEXT = "I couldn't read that command."


class AskCog(commands.Cog, name="Ask"):
    def __init__(self, bot: TeammateBot) -> None:
        self.bot = bot

    @app_commands.command(name="ask", description="Ask Teammate something")
    @app_commands.describe(prompt="What you want to ask")
    async def ask(self, interaction: discord.Interaction[Any], prompt: str) -> None:
        command = parse_interaction(interaction_payload(interaction))
        if not isinstance(command, SlashCommand) or command.name != "ask":
            await interaction.response.send_message(UNREADABLE_COMMAND_TEXT, ephemeral=True)
            return
        if await self.bot.refused(interaction, command.context):
            return
        # A re-delivered interaction is deferred once (a second defer would fail).
        async with self.bot.deliveries.first(command.context.delivery_id) as first:
            if first:
                await self._ask(interaction, command)

    async def _ask(self, interaction: discord.Interaction[Any], command: SlashCommand) -> None:
        if self.bot.closing:
            await interaction.response.send_message(RESTARTING_TEXT, ephemeral=True)
            return
        entry = await self._write_down(interaction)
        # Within Discord's 3 seconds: "Teammate is thinking…" shows until the answer streams.
        callback = await interaction.response.defer(thinking=True)
        # The callback's answer carries the "thinking" message: no GET of @original per /ask
        # (under load every request competes with the next interaction's defer).
        resource = callback.resource if callback is not None else None
        original = (
            resource
            if isinstance(resource, discord.InteractionMessage)
            else await interaction.original_response()
        )
        await self._answer_ask(command, interaction.channel, original, interaction)
        if entry is not None:
            await self.bot.journal.done(entry)

    async def _write_down(self, interaction: discord.Interaction[Any]) -> int | None:
        """The /ask in the journal (fsynced), or None if that took too long or failed: then
        it is answered all the same, only not across a crash."""
        try:
            async with asyncio.timeout(ASK_JOURNAL_MAX_WAIT_S):
                return await self.bot.journal.record(ASK, interaction_payload(interaction))
        except (TimeoutError, OSError) as exc:
            log.warning(
                "an /ask was not written down (%s): a crash before it is stored loses it", exc
            )
            return None

    async def replay_ask(self, replay: Replay) -> None:
        """An /ask a crashed process deferred and had not stored: find its "thinking…"
        response through the interaction's token (alive 15 minutes) and answer it there. One
        never deferred, or older than the token, is given up: the person saw it fail."""
        bot = self.bot
        command = parse_interaction(replay.body)
        token, application_id = replay.body.get("token"), replay.body.get("application_id")
        if not isinstance(command, SlashCommand) or not token or not application_id:
            await bot.journal.done(replay.entry)
            return
        context = command.context
        route = discord.http.Route(
            "GET",
            "/webhooks/{webhook_id}/{webhook_token}/messages/@original",
            webhook_id=application_id,
            webhook_token=token,
        )
        try:
            shown = await bot.http.request(route)
            channel = bot.get_channel(int(context.channel_id)) or await bot.fetch_channel(
                int(context.channel_id)
            )
        except discord.HTTPException as exc:
            log.warning("an /ask from before a restart is gone (%s); not answered", exc.status)
            await bot.journal.done(replay.entry)
            return
        log.info("answering an /ask from before a restart (interaction %s)", context.delivery_id)
        if isinstance(channel, discord.TextChannel | discord.Thread | discord.DMChannel):
            original = channel.get_partial_message(int(shown["id"]))
            await self._answer_ask(command, channel, original, None)
        await bot.journal.done(replay.entry)

    async def _answer_ask(
        self,
        command: SlashCommand,
        channel: object,
        original: discord.Message | discord.PartialMessage,
        interaction: discord.Interaction[Any] | None,
    ) -> None:
        """After the defer: the thread from the response (in a text channel), then the
        runner. `interaction` is None for an /ask replayed after a restart (its response is
        then edited with the bot token)."""
        bot, context = self.bot, command.context
        if channel is None or not isinstance(channel, discord.abc.Messageable):
            return
        conversation_channel = channel
        head_channel: discord.abc.Messageable | None = None
        thread_id = context.channel_id
        if not context.is_dm and not context.in_thread and isinstance(channel, discord.TextChannel):
            # The conversation continues in a thread started from the answer.
            try:
                thread = await bot.thread_from(original, command.prompt)
            except discord.Forbidden:
                log.warning("no permission to create threads in %s", context.channel_key)
                if interaction is not None:
                    await interaction.edit_original_response(content=NO_THREADS_TEXT)
                else:
                    await original.edit(content=NO_THREADS_TEXT)
                return
            conversation_channel, head_channel, thread_id = thread, channel, str(thread.id)
        key = conversation_key(context.guild_id, thread_id)
        bot.known.remember(key)
        incoming = Incoming(
            conversation_key=key,
            channel_key=context.channel_key,
            author=context.person.author(),
            text=command.prompt,
            delivery_id=context.delivery_id,
            timestamp=context.timestamp,
            platform_message_id=context.interaction_id,
            title=channel_title(channel),
        )
        surface = bot.surface(
            conversation_channel,
            channel_id=int(thread_id),
            conversation_channel_id=thread_id,
            interaction=interaction,
            head_id=original.id,
            head_channel=head_channel,
        )
        await bot.runner.submit(incoming, surface)
