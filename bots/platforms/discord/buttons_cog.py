"""The Stop and 👍/👎 buttons on Discord, pressed.

Owns: `ButtonsCog`, which registers the persistent buttons (`bots.platforms.discord.buttons`, so a
press on an answer from before a restart is understood) and handles a press: the translated
interaction, the access check, then the shared checks of `bots.features.clicks` (a Stop button names
its conversation's thread: trusted only once the store says it is of the channel pressed in),
and the private answer Discord needs for every press.

Must not: stop or count anything but through `bots.features.clicks`, or touch storage or tools.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import discord
from discord.ext import commands

from bots.features.approvals_clicks import UNKNOWN_APPROVAL_TEXT, ApprovalClick, approval_click
from bots.features.clicks import (
    FEEDBACK_TEXT,
    STALE_STOP_TEXT,
    UNKNOWN_RUN_TEXT,
    RunClick,
    feedback_click,
    stop_click,
)
from bots.features.commands import STOPPED_TEXT
from bots.platforms.discord.access import is_admin
from bots.platforms.discord.buttons import BUTTONS_COG, DYNAMIC_ITEMS, Choice
from bots.platforms.discord.events import ButtonPress, parse_interaction
from bots.platforms.discord.payloads import interaction_payload

if TYPE_CHECKING:
    from bots.platforms.discord.bot import TeammateBot

__all__ = ["ButtonsCog"]

log = logging.getLogger(__name__)

DECIDED_TEXT: dict[Choice, str] = {
    "approve": "Approved.",
    "deny": "Denied.",
    "rest": "Approved, with the rest of this run's calls of the tool.",
}


class ButtonsCog(commands.Cog, name=BUTTONS_COG):
    """A `bots.platforms.discord.buttons.ButtonHandler`."""

    def __init__(self, bot: TeammateBot) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        self.bot.add_dynamic_items(*DYNAMIC_ITEMS)

    async def cog_unload(self) -> None:
        self.bot.remove_dynamic_items(*DYNAMIC_ITEMS)

    async def on_stop_button(
        self, interaction: discord.Interaction[Any], run_id: int, channel_id: str | None
    ) -> None:
        press = await self._press(interaction)
        if press is None:
            await _answer(interaction, STALE_STOP_TEXT)
            return
        if await self.bot.refused(interaction, press.context):
            return
        click = self._click(press, run_id)
        if press.target_channel_id is not None:
            click = RunClick(
                click.run_id,
                click.by,
                click.channel_keys,
                click.conversation_keys,
                named_conversation=press.conversation_key,
            )
        result = await stop_click(self.bot.runner, click)
        await _answer(interaction, STOPPED_TEXT if result == "stopped" else STALE_STOP_TEXT)

    async def on_feedback_button(
        self, interaction: discord.Interaction[Any], run_id: int, vote: Literal["up", "down"]
    ) -> None:
        press = await self._press(interaction)
        if press is None:
            await _answer(interaction, UNKNOWN_RUN_TEXT)
            return
        if await self.bot.refused(interaction, press.context):
            return
        # Only a run of the channel pressed in: an id naming another channel's is forged.
        result = await feedback_click(self.bot.runner, self._click(press, run_id), vote)
        await _answer(interaction, FEEDBACK_TEXT if result == "kept" else UNKNOWN_RUN_TEXT)

    async def on_approval_button(
        self, interaction: discord.Interaction[Any], approval_id: int, choice: Choice
    ) -> None:
        """Only an approver's press counts (checked from the interaction's own user);
        anyone else, or a press on a request decided already, gets a private note."""
        press = await self._press(interaction)
        if press is None or press.action != "approval":
            await _answer(interaction, UNKNOWN_APPROVAL_TEXT)
            return
        if await self.bot.refused(interaction, press.context):
            return
        context = press.context
        pressed = ApprovalClick(
            approval_id,
            choice,
            context.person.author(),
            is_admin=is_admin(self.bot.config, context.person),
            channel_keys=(context.channel_key,),
        )
        note = await approval_click(self.bot.runner.approvals, pressed)
        await _answer(interaction, note or DECIDED_TEXT[choice])

    async def _press(self, interaction: discord.Interaction[Any]) -> ButtonPress | None:
        parsed = parse_interaction(interaction_payload(interaction))
        return parsed if isinstance(parsed, ButtonPress) else None

    def _click(self, press: ButtonPress, run_id: int) -> RunClick:
        context = press.context
        return RunClick(
            run_id,
            context.person.author(),
            channel_keys=(context.channel_key,),
            conversation_keys=(context.conversation_key,),
        )


async def _answer(interaction: discord.Interaction[Any], text: str) -> None:
    await interaction.response.send_message(text, ephemeral=True)
