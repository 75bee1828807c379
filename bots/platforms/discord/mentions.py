"""Who a Discord message mentions, and its text with the mentions made readable.

Owns: whether a message addresses the bot (its mention, its managed role's mention, a reply to
it) and the text with the bot's own mentions removed and everyone else's named. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

_MENTION = re.compile(r"<@!?([0-9]{1,20})>")
_ROLE_MENTION = re.compile(r"<@&([0-9]{1,20})>")


def addressed(
    content: str,
    replied_to: tuple[str, str | None] | None,
    bot_user_id: str,
    bot_role_ids: Collection[str],
) -> tuple[bool, bool]:
    """(addressed to the bot, mentions someone else). The bot is addressed by its mention, by
    a mention of its own role (`<@&ROLE>`: Discord's @ autocomplete offers the bot's managed
    role beside the bot, and silence after a visible mention looks broken), or by a reply to
    it (Discord lists the replied-to author in `mentions` only when the reply pings)."""
    in_content = {match.group(1) for match in _MENTION.finditer(content)}
    roles = {match.group(1) for match in _ROLE_MENTION.finditer(content)}
    mentioned = (
        bot_user_id in in_content
        or bool(roles & set(bot_role_ids))
        or (replied_to is not None and replied_to[1] == bot_user_id)
    )
    return mentioned, bool(in_content - {bot_user_id})


def name_mentions(
    text: str, bot_user_id: str, names: Mapping[str, str], bot_role_ids: Collection[str] = ()
) -> str:
    """Remove the bot's own mentions (of it, or of its role); name everyone else's (`@Ada`)
    so the model knows who."""

    def rewrite(match: re.Match[str]) -> str:
        user_id = match.group(1)
        if user_id == bot_user_id:
            return ""
        name = names.get(user_id)
        return f"@{name}" if name is not None else match.group(0)

    rewritten = _MENTION.sub(rewrite, text)
    for role_id in bot_role_ids:
        rewritten = rewritten.replace(f"<@&{role_id}>", "")
    return re.sub(r"[ \t]{2,}", " ", rewritten).strip()
