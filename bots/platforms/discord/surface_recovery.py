"""What an earlier process showed of a run on Discord (part of `bots.platforms.discord.surface`; see
its "Recovery").

Owns: `Recovered` (what a stored `ref` says was shown), reading it from a ref
(`recovered_from_ref`, total over whatever the ref holds), and `adopt_shown_parts`: finding the
messages an earlier process posted for a stretch of answer (the parts its ref names, then the
bot's own messages after what the ref knew that read like the next part, or are a long
answer's one message), so a restart edits them in place instead of posting them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import discord

from bots.platforms.discord.pacing import ChannelPacer
from bots.platforms.discord.surface_parts import (
    OVERFLOW_FILE,
    Block,
    continues,
    is_overflow_note,
    split_parts,
)
from bots.platforms.discord.surface_posted import BotMessage, Posted, partial_message

log = logging.getLogger(__name__)

LOOKUP_LIMIT = 50  # the bot's messages read after a crash to find an unrecorded part
REF_PARTS = 10  # parts a ref may name (earlier versions showed up to ten); extras are deleted


@dataclass(slots=True, frozen=True)
class Recovered:
    """What an earlier process's `ref` says it showed (see the module's "Recovery")."""

    parts: tuple[int, ...] = ()  # the latest stretch of answer text, in order
    after: int | None = None  # the newest message it had posted when the ref was stored
    tools: int = 0  # tool calls it had shown (their embeds posted)
    head_text: bool = False  # the head shows answer text (not the "working" status)
    attached: bool = False  # the latest stretch's one message has its file attached


def recovered_from_ref(ref: dict[str, Any]) -> Recovered:
    raw_parts = ref.get("parts")
    parts = raw_parts[:REF_PARTS] if isinstance(raw_parts, list) else []
    tools = ref.get("tools")
    return Recovered(
        parts=tuple(part for part in map(ref_int, parts) if part is not None),
        after=ref_int(ref.get("after")),
        tools=tools if isinstance(tools, int) and 0 <= tools <= 1_000_000 else 0,
        head_text=ref.get("head_text") is True,
        attached=ref.get("attached") is True,
    )


def ref_int(value: object) -> int | None:
    """A snowflake as a ref stores it (a string of digits), else None."""
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 20 else None


async def adopt_shown_parts(
    block: Block,
    recovered: Recovered,
    *,
    channel: discord.abc.Messageable,
    head: Posted | None,
    head_free: bool,
    head_elsewhere: bool,
    own_id: int | None,
    pacer: ChannelPacer,
) -> None:
    """Find what an earlier process showed of `block` (a restart's report): the parts its
    ref names (or the head, when `head_free`: nothing else showed text in it), then any of the
    bot's own messages after what the ref knew that reads like the next part, or is a long
    answer's one message (posted in the instant before it could be stored). They are edited in
    place, never posted again. `head_elsewhere`: the head is an `/ask`'s in the channel, whose
    text may have moved to the thread just before the crash: that copy is the part."""
    for part_id in recovered.parts:
        if head is not None and part_id == head.id:
            block.posted.append(head)
        else:
            block.posted.append(BotMessage(partial_message(channel, part_id), "", pacer))
    if not block.posted and head_free:
        assert head is not None
        block.posted.append(head)
    block.overflow_attached = recovered.attached
    expected, overflows = split_parts(block.text)
    first_is_head = bool(block.posted) and block.posted[0] is head
    missing = len(block.posted) < len(expected) or (overflows and not block.overflow_attached)
    known = [*recovered.parts, *([head.id] if head is not None else [])]
    anchor = max(recovered.after or 0, *known, 0)
    if not (missing or (first_is_head and head_elsewhere)) or not anchor or own_id is None:
        return
    for message in await _own_messages_after(channel, own_id, anchor):
        if _is_tool_embed(message):
            continue
        found = BotMessage(message, message.content, pacer)
        if overflows and is_overflow_note(message.content):
            if not block.posted or first_is_head:  # the one message, never stored
                block.posted[:1] = [found]
                first_is_head = False
            block.overflow_attached = any(a.filename == OVERFLOW_FILE for a in message.attachments)
        elif message.content and not message.attachments:
            if first_is_head and head_elsewhere and continues(message.content, expected[0]):
                block.posted[0] = found  # moved out of the head: the head is no part
                first_is_head = False
            elif len(block.posted) < len(expected) and continues(
                message.content, expected[len(block.posted)]
            ):
                block.posted.append(found)


def _is_tool_embed(message: discord.Message) -> bool:
    """A tool call's embed: one this bot set ("rich"). The previews Discord adds to a part's
    links are embeds too, and do not make the part anything but a part."""
    return any(embed.type == "rich" for embed in message.embeds)


async def _own_messages_after(
    channel: discord.abc.Messageable, own_id: int, anchor: int
) -> list[discord.Message]:
    """The bot's own messages after `anchor`, oldest first (one read, bounded)."""
    found: list[discord.Message] = []
    try:
        async for message in channel.history(
            limit=LOOKUP_LIMIT, after=discord.Object(id=anchor), oldest_first=True
        ):
            if message.id > anchor and message.author.id == own_id:
                found.append(message)
    except discord.HTTPException:
        log.warning("could not read the channel to find an answer's parts; posting them")
    return sorted(found, key=lambda message: message.id)
