"""Discord's slash commands besides `/ask`: `/stop`, `/new`, `/usage`, `/reset`, and
`/teammate config` and `/teammate memory`.

Owns: `CommandsCog` (the commands and their options, as Discord shows them), reading an
interaction into a `bots.features.commands.CommandPlace` and the command's arguments, Discord's
`Markup`, and the private (ephemeral) answer. What each command does and says is
`bots.features.commands`: used in a thread or a DM it acts on that conversation, used in a channel
on the channel's conversations.

Must not: act on the runner itself (`bots.features.commands` does), or touch storage or tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import discord
from discord import app_commands
from discord.ext import commands

from bots.features.channel_config import ConfigChange
from bots.features.commands import CommandPlace, Markup
from bots.features.memory import MemoryCommand
from bots.platforms.discord.access import ADMIN_TEXT, is_admin
from bots.platforms.discord.ask_cog import UNREADABLE_COMMAND_TEXT
from bots.platforms.discord.events import (
    InteractionContext,
    OptionValue,
    SlashCommand,
    parse_interaction,
)
from bots.platforms.discord.payloads import interaction_payload

if TYPE_CHECKING:
    from bots.platforms.discord.bot import TeammateBot

__all__ = ["DISCORD_MARKUP", "CommandsCog"]

MAX_ANSWER_CHARS = 2_000  # Discord's limit on a message

DISCORD_MARKUP = Markup(
    bold="**",
    bullet="-",
    config_usage="Change it with `/teammate config` and its options `prompt`, `model`, "
    "`tools`, `timezone`, `reset`.",
    admin_text=ADMIN_TEXT,
)

Simple = Literal["stop", "new", "usage", "reset"]


class CommandsCog(commands.Cog, name="Commands"):
    teammate = app_commands.Group(name="teammate", description="Teammate's settings")

    def __init__(self, bot: TeammateBot) -> None:
        self.bot = bot

    @app_commands.command(name="stop", description="Stop Teammate's answer here")
    async def stop_command(self, interaction: discord.Interaction[Any]) -> None:
        await self._simple(interaction, "stop")

    @app_commands.command(name="new", description="Start a fresh conversation here")
    async def new_command(self, interaction: discord.Interaction[Any]) -> None:
        await self._simple(interaction, "new")

    @app_commands.command(name="usage", description="What this channel used today (UTC)")
    async def usage_command(self, interaction: discord.Interaction[Any]) -> None:
        await self._simple(interaction, "usage")

    @app_commands.command(name="reset", description="Forget this conversation's history")
    async def reset_command(self, interaction: discord.Interaction[Any]) -> None:
        await self._simple(interaction, "reset")

    @teammate.command(name="config", description="Show or change this channel's settings")
    @app_commands.describe(
        prompt="Extra instructions for this channel ('clear' removes them)",
        model="The model here ('default': the configuration file's)",
        tools="Tools here, e.g. read,grep ('none'; 'default': the file's)",
        reset="Forget everything set here",
        timezone="Time zone for scheduled work, e.g. Europe/Berlin ('default': the file's)",
    )
    async def config_command(
        self,
        interaction: discord.Interaction[Any],
        prompt: str | None = None,
        model: str | None = None,
        tools: str | None = None,
        reset: bool = False,
        timezone: str | None = None,
    ) -> None:
        # The options are read from the interaction's payload, like every other command's.
        command = await self._command(interaction, "config", check_access=False)
        if command is not None:
            change = _config_change(dict(command.options))
            text = await self.bot.channel_commands.config(self._place(command.context), change)
            await _answer(interaction, text)

    @teammate.command(name="memory", description="This channel's memory: list, add, forget")
    @app_commands.describe(
        add="A note to keep for this channel",
        forget="The id of a note to forget",
        clear="Forget every note (admins)",
    )
    async def memory_command(
        self,
        interaction: discord.Interaction[Any],
        add: str | None = None,
        forget: int | None = None,
        clear: bool = False,
    ) -> None:
        command = await self._command(interaction, "memory")
        if command is not None:
            wanted = _memory_command(dict(command.options))
            text = await self.bot.channel_commands.memory(self._place(command.context), wanted)
            await _answer(interaction, text)

    async def _simple(self, interaction: discord.Interaction[Any], name: Simple) -> None:
        command = await self._command(interaction, None)
        if command is None:
            return
        place, run = self._place(command.context), self.bot.channel_commands
        if name == "stop":
            text = await run.stop(place)
        elif name == "usage":
            text = await run.usage(place)
        else:
            text = await run.reset(place)
        await _answer(interaction, text)

    async def _command(
        self,
        interaction: discord.Interaction[Any],
        name: Literal["config", "memory"] | None,
        *,
        check_access: bool = True,
    ) -> SlashCommand | None:
        """The command as its payload says, or None once the person was told why not."""
        command = parse_interaction(interaction_payload(interaction))
        if not isinstance(command, SlashCommand) or (name and command.name != name):
            await _answer(interaction, UNREADABLE_COMMAND_TEXT)
            return None
        if check_access and await self.bot.refused(interaction, command.context):
            return None
        return command

    def _place(self, context: InteractionContext) -> CommandPlace:
        """In a thread or a DM, its conversation; in a channel, the channel."""
        in_conversation = context.is_dm or context.in_thread
        return CommandPlace(
            channel_key=context.channel_key,
            conversation_key=context.conversation_key if in_conversation else None,
            by=context.person.author(),
            is_admin=is_admin(self.bot.config, context.person),
        )


async def _answer(interaction: discord.Interaction[Any], text: str) -> None:
    await interaction.response.send_message(text[:MAX_ANSWER_CHARS], ephemeral=True)


def _config_change(options: dict[str, OptionValue]) -> ConfigChange:
    """`/teammate config`'s options; none at all shows the configuration."""

    def text(name: str) -> str | None:
        value = options.get(name)
        return value if isinstance(value, str) else None

    return ConfigChange(
        prompt=text("prompt"),
        model=text("model"),
        tools=text("tools"),
        reset=options.get("reset") is True,
        timezone=text("timezone"),
    )


def _memory_command(options: dict[str, OptionValue]) -> MemoryCommand:
    """`/teammate memory` with `add`, `forget` or `clear`; no option lists the notes."""
    add, forget = options.get("add"), options.get("forget")
    if options.get("clear") is True:
        return MemoryCommand("clear")
    if isinstance(add, str) and add.strip():
        return MemoryCommand("add", text=add)
    if isinstance(forget, int) and not isinstance(forget, bool):
        return MemoryCommand("forget", note_id=forget)
    return MemoryCommand("list")
