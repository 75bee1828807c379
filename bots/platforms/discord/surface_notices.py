"""A notice on Discord (part of `bots.platforms.discord.surface`).

Owns: how a `Notice` is shown. One for everyone is a line in the conversation. One for a
person is private where it can be: the acknowledgements of a message steered into a running
answer are reactions on that message (👀 queued, ✅ taken into account); others go ephemeral
through a live interaction, else are addressed to the person, the only mention a surface makes.
"""

from __future__ import annotations

import logging
from typing import Any

import discord

from bots.platforms.discord.surface_lines import cut, notice_line
from bots.platforms.discord.surface_parts import MESSAGE_LIMIT
from bots.platforms.discord.surface_posted import NO_MENTIONS, Poster, token_refused
from bots.runner import DELIVERED_TEXT, QUEUED_TEXT
from bots.surface.contract import Notice

log = logging.getLogger(__name__)

# A person's own message steered into a running answer is acknowledged with a reaction on it,
# not a line in the thread: 👀 when queued, ✅ once the answer takes it into account.
_REACTIONS = {QUEUED_TEXT: "👀", DELIVERED_TEXT: "✅"}


async def reacted(event: Notice, reply_to: discord.Message | None) -> bool:
    """Acknowledge a steered message with a reaction on it; False: say it in words instead."""
    reaction = _REACTIONS.get(event.text)
    if reaction is None or event.audience is None or reply_to is None:
        return False
    try:
        await reply_to.add_reaction(reaction)
    except discord.HTTPException:
        log.info("could not react to a message; acknowledging in words")
        return False
    return True


async def post_notice(
    event: Notice, poster: Poster, live_interaction: discord.Interaction[Any] | None
) -> None:
    """The notice as a message: for everyone, ephemeral through `live_interaction` (one whose
    token is alive), else addressed to its one person."""
    text = notice_line(event)
    if event.audience is None:
        await poster.send(text)
        return
    if live_interaction is not None:
        try:
            await live_interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS)
            return
        except discord.HTTPException as exc:
            if not token_refused(exc):
                raise
    user_id = event.audience.id
    if user_id.isdigit():
        mentions = discord.AllowedMentions(
            everyone=False, roles=False, users=[discord.Object(id=int(user_id))]
        )
        await poster.send(cut(f"<@{user_id}> {text}", MESSAGE_LIMIT), allowed_mentions=mentions)
    else:
        await poster.send(text)
