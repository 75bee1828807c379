"""Teammate's Discord bot: its set-up, its lifetime, and what its features share.

Owns: `TeammateBot` (a discord.py `commands.Bot`): adding the features as cogs in
`setup_hook` (`bots.platforms.discord.ask_cog`: `/ask` and its journal's replay;
`bots.platforms.discord.commands_cog`: the other slash commands;
`bots.platforms.discord.messages_cog`: mentions, messages in Teammate's threads and DMs;
`bots.platforms.discord.buttons_cog`: the Stop and feedback buttons), syncing the slash commands (to
the development guild when one is configured: instant), the `/ask` journal (opened here, replayed
once the gateway is ready, closed last), a graceful stop, scheduled work's threads (`start_thread`),
and what the cogs share: the runner, the access checks, which threads are Teammate's (`known`), the
de-duplication of deliveries (`deliveries`), threads started from a message, and surfaces. Also the
sharded variant and `create_bot`.

Must not: touch storage or tools (the runner does), or import `bots.platforms.slack`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import discord
from discord.ext import commands

from bots.delivery_dedup import DeliveryDedup
from bots.features.clicks import FEEDBACK_TEXT
from bots.features.commands import ChannelCommands
from bots.features.scheduler import SCHEDULED_BY, StartedThread
from bots.journal import EventJournal
from bots.known_threads import KnownConversations
from bots.platforms.discord.ask_cog import ASK_JOURNAL_DIR, AskCog
from bots.platforms.discord.buttons_cog import ButtonsCog
from bots.platforms.discord.commands_cog import DISCORD_MARKUP, CommandsCog
from bots.platforms.discord.events import DM, InteractionContext, conversation_key
from bots.platforms.discord.memberships import DmMemberships
from bots.platforms.discord.messages_cog import MessagesCog
from bots.platforms.discord.pacing import ChannelPacer
from bots.platforms.discord.surface import EDIT_INTERVAL_S, DiscordSurface, DiscordSurfaces
from bots.platforms.discord.threads import NO_THREADS_TEXT, channel_title, thread_from
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings, SettingsError

__all__ = [
    "DISCORD_RULES",
    "FEEDBACK_TEXT",
    "NO_THREADS_TEXT",
    "ShardedTeammateBot",
    "TeammateBot",
    "create_bot",
]

log = logging.getLogger(__name__)

DISCORD_RULES = """\
You are talking with people in Discord. Your reply is rendered as Discord Markdown: short \
paragraphs, `-` lists, **bold**, fenced code blocks with a language; no tables and no headings \
deeper than ###. Messages are split at 2,000 characters, so keep answers focused."""


class TeammateBot(commands.Bot):
    """The bot. `runner` answers; `settings.discord` says who may use it and how it syncs.
    `surfaces` is the `DiscordSurfaces` given to the runner, if any: the bot binds it.
    One gateway connection: all guilds, or the one shard `[discord] shard_ids` names (of
    `shard_count`); `create_bot` picks `ShardedTeammateBot` for several shards."""

    def __init__(
        self,
        runner: ConversationRunner,
        settings: Settings,
        *,
        edit_interval_s: float = EDIT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        surfaces: DiscordSurfaces | None = None,
        **options: Any,
    ) -> None:
        intents = discord.Intents.default()
        intents.message_content = settings.discord.message_content
        options = (
            _shard_options(settings.discord, several=isinstance(self, commands.AutoShardedBot))
            | options
        )
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            help_command=None,
            allowed_mentions=discord.AllowedMentions.none(),
            **options,
        )
        self.runner = runner
        self.settings = settings
        self.config = settings.discord
        self.memberships = DmMemberships(self, self.config)
        # One lane per channel for every surface's writes: Discord's limit is the bot's.
        self.pacer = ChannelPacer()
        # The runner's factory for earlier runs' surfaces (recovery), bound to this bot.
        self.surfaces = surfaces or DiscordSurfaces()
        self.surfaces.attach(self, self.pacer)
        self._edit_interval_s = edit_interval_s
        self._clock = clock
        # A guild's events reach this shard only: a thread the store did not know stays not
        # ours until this process starts a conversation there, so it is asked about once.
        self.known = KnownConversations(runner.conversations.known, remember_unknown=True)
        self.deliveries = DeliveryDedup()  # gateway re-deliveries, before the durable claim
        self.channel_commands = ChannelCommands(runner, settings, DISCORD_MARKUP, clock=wall_clock)
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False  # a graceful stop began: no new conversations or runs
        self.journal = EventJournal(settings.data_dir / ASK_JOURNAL_DIR)
        self._replayed = False

    # -- start-up and shut-down ---------------------------------------------------------------

    async def setup_hook(self) -> None:
        for cog in (AskCog(self), CommandsCog(self), MessagesCog(self), ButtonsCog(self)):
            await self.add_cog(cog)
        guild_id = self.config.dev_guild_id
        if guild_id is not None:
            guild = discord.Object(id=int(guild_id))
            self.tree.copy_global_to(guild=guild)
            await self.tree.sync(guild=guild)
            log.info("slash commands synced to the development guild %s", guild_id)
        else:
            await self.tree.sync()
            log.info("slash commands synced globally (they may take a while to appear)")

    async def on_ready(self) -> None:
        mode = (
            "with the Message Content intent: messages in my threads continue conversations"
            if self.intents.message_content
            else "without the Message Content intent: mentions, replies to me and DMs only"
        )
        log.info("Discord: logged in as %s, %s", self.user, mode)
        if not self._replayed:  # once: on_ready comes again after a reconnect
            self._replayed = True
            asks = self.get_cog(AskCog.__cog_name__)
            assert isinstance(asks, AskCog)
            for replay in await self.journal.adopt_orphans():
                self.spawn(asks.replay_ask(replay))

    async def on_message(self, message: discord.Message, /) -> None:
        """Nothing here: messages are the messages cog's, and Teammate has no prefix
        commands for discord.py's default to look for."""

    async def stop_taking_work(self, *, grace_s: float) -> None:
        """A graceful stop: new messages and `/ask` are no longer taken; messages already
        being handed to the runner are, and answers in progress get up to `grace_s`."""
        self.closing = True
        if grace_s <= 0:
            return
        pending = [task for task in self._tasks if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        try:
            await asyncio.wait_for(self.runner.wait_all(), grace_s)
        except TimeoutError:
            log.info("answers still running after %.0f s; they will be stopped", grace_s)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await super().close()
        await self.journal.close()  # an /ask not yet stored is answered at the next start

    # -- what the cogs share ------------------------------------------------------------------

    async def refused(
        self, interaction: discord.Interaction[Any], context: InteractionContext
    ) -> bool:
        """True, after a private note saying why, when this person may not use Teammate
        where the interaction came from (`bots.platforms.discord.access`)."""
        refusal = await self.memberships.refusal_for(
            context.person, guild_id=context.guild_id, channel_id=context.parent_channel_id
        )
        if refusal is not None:
            await interaction.response.send_message(refusal, ephemeral=True)
            return True
        return False

    async def thread_from(
        self, message: discord.Message | discord.PartialMessage, text: str
    ) -> discord.Thread:
        return await thread_from(self, message, text)

    def surface(self, channel: discord.abc.Messageable, **options: Any) -> DiscordSurface:
        """A surface in `channel` (`options`: `DiscordSurface`'s), at the bot's edit pace."""
        return DiscordSurface(
            channel,
            clock=self._clock,
            edit_interval_s=self._edit_interval_s,
            pacer=self.pacer,
            **options,
        )

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` in a task the bot keeps (and waits for in a graceful stop)."""
        task: asyncio.Task[None] = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("handling a Discord message failed", exc_info=task.exception())

    # -- scheduled work (bots.features.scheduler.ThreadStarter) -----------------------------

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        """A new message in the channel, attributed to `for_user` (the only one it may ping),
        and a thread started from it where the run is shown; in a DM, the DM itself."""
        _platform, guild, channel_id = channel_key.split(":", 2)
        channel = self.get_channel(int(channel_id)) or await self.fetch_channel(int(channel_id))
        if not isinstance(channel, discord.abc.Messageable):
            raise ValueError(f"{channel_key} is not a channel Teammate can write in")
        head = SCHEDULED_BY.format(mention=f"<@{for_user}>", text=text)
        only_them = discord.AllowedMentions(
            everyone=False, roles=False, users=[discord.Object(int(for_user))]
        )
        posted = await channel.send(head[:2_000], allowed_mentions=only_them)
        where: discord.abc.Messageable = channel
        thread_id = channel_id
        if guild != DM:
            thread = await self.thread_from(posted, text)
            where, thread_id = thread, str(thread.id)
        key = conversation_key(None if guild == DM else guild, thread_id)
        self.known.remember(key)
        surface = self.surface(where, channel_id=int(thread_id), conversation_channel_id=thread_id)
        return StartedThread(key, surface, title=channel_title(channel))


class ShardedTeammateBot(TeammateBot, commands.AutoShardedBot):
    """The bot on several gateway shards in one process (discord.py's `AutoShardedBot`):
    `[discord] shard_ids` of `shard_count`, or every shard when `shard_ids` is empty."""


def create_bot(runner: ConversationRunner, settings: Settings, **options: Any) -> TeammateBot:
    """The bot for the configured sharding (docs/architecture.md, "Several instances"):
    one connection unless `[discord] shard_count` asks for several shards in this process."""
    config = settings.discord
    several = config.shard_count is not None and len(config.shard_ids) != 1
    kind = ShardedTeammateBot if several else TeammateBot
    return kind(runner, settings, **options)


def _shard_options(config: DiscordSettings, *, several: bool) -> dict[str, Any]:
    """discord.py's shard arguments: a plain client takes one `shard_id`, an auto-sharded
    one a list of `shard_ids` (None: all of `shard_count`)."""
    if config.shard_count is None:
        return {}
    if several:
        return {"shard_count": config.shard_count, "shard_ids": list(config.shard_ids) or None}
    if len(config.shard_ids) != 1:
        raise SettingsError(
            "[discord] shard_ids: one connection opens one shard; use create_bot for several"
        )
    return {"shard_count": config.shard_count, "shard_id": config.shard_ids[0]}
