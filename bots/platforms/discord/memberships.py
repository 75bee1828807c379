"""A DM's sender, looked up in the guilds that admit people (bots.platforms.discord.access, "A DM is
no way around the lists").

Owns: which guilds admit people (the allowed guilds; else the guilds holding an allowed
channel; else every guild the bot is in), the sender's roles in each (the member cache, else
`GET /guilds/{id}/members/{user}`), a short-lived cache of the answer, and `refusal_for`, the
adapter's one call for any message or interaction.

Must not: admit anyone itself (`discord_refusal` decides), or let a failed lookup admit: a
guild that cannot be asked counts as one the person is not in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

import discord

from bots.platforms.discord.access import discord_refusal, dm_needs_memberships
from bots.platforms.discord.events import Person
from bots.settings import DiscordSettings

log = logging.getLogger(__name__)

MEMBERSHIP_TTL_S = 300.0  # a role granted or taken counts within five minutes
MEMBERSHIP_CACHE = 1024  # people remembered
LOOKUP_TIMEOUT_S = 1.5  # an interaction must be answered within 3 s


class DmMemberships:
    """The roles a DM's sender has in the admitting guilds, by user id, cached briefly."""

    def __init__(self, client: Any, config: DiscordSettings) -> None:
        self._client = client
        self._config = config
        self._cache: OrderedDict[str, tuple[float, dict[str, frozenset[str]]]] = OrderedDict()

    async def refusal_for(
        self, person: Person, *, guild_id: str | None, channel_id: str
    ) -> str | None:
        """`discord_refusal` for a message or interaction, with the lookup a DM needs."""
        memberships = None
        if guild_id is None and dm_needs_memberships(self._config, person):
            memberships = await self.of(person.user_id)
        return discord_refusal(
            self._config,
            person,
            guild_id=guild_id,
            channel_id=channel_id,
            memberships=memberships,
        )

    async def of(self, user_id: str) -> dict[str, frozenset[str]]:
        cached = self._cache.get(user_id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(user_id)
            return cached[1]
        try:
            found = await asyncio.wait_for(self._look_up(user_id), LOOKUP_TIMEOUT_S)
        except TimeoutError:
            log.warning("Discord: looking up DM sender %s in the allowed guilds timed out", user_id)
            return {}  # not cached: the next message asks again
        self._cache[user_id] = (now + MEMBERSHIP_TTL_S, found)
        while len(self._cache) > MEMBERSHIP_CACHE:
            self._cache.popitem(last=False)
        return found

    def admitting_guilds(self) -> list[Any]:
        config = self._config
        if config.allowed_guilds:
            wanted = set(config.allowed_guilds)
            return [g for g in self._client.guilds if str(g.id) in wanted]
        if config.allowed_channels:
            holding = {
                channel.guild.id
                for channel_id in config.allowed_channels
                if (channel := self._client.get_channel(int(channel_id))) is not None
                and getattr(channel, "guild", None) is not None
            }
            return [g for g in self._client.guilds if g.id in holding]
        return list(self._client.guilds)

    async def _look_up(self, user_id: str) -> dict[str, frozenset[str]]:
        found: dict[str, frozenset[str]] = {}
        for guild in self.admitting_guilds():
            member = guild.get_member(int(user_id))
            if member is None:
                try:
                    member = await guild.fetch_member(int(user_id))
                except discord.NotFound:
                    continue
                except discord.HTTPException as exc:
                    log.warning("Discord: could not look up %s in %s: %s", user_id, guild.id, exc)
                    continue
            found[str(guild.id)] = frozenset(str(role.id) for role in member.roles)
        return found
