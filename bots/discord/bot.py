"""Teammate's Discord bot: gateway events and commands in, the shared runner out.

Owns: `TeammateBot` (a discord.py `commands.Bot`): the slash commands (`/ask`, `/stop`, `/new`,
`/usage`, `/reset`, `/teammate config`) synced in `setup_hook` (to the development guild when
one is configured: instant), mentions that open a thread, messages in Teammate's threads and
DMs, the Stop and feedback buttons (persistent, so they work after a restart), access checks,
attachments and backfill of an existing thread. What it receives is translated by
`bots.discord.events` (through `bots.discord.payloads`), so keys, filtering and bounds live in
one pure place.

Must not: touch storage or tools (the runner does), or import `bots.slack`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

import discord
from discord import app_commands
from discord.ext import commands

from bots.budgets import utc_day_start
from bots.channel_config import (
    ConfigChange,
    ConfigView,
    describe,
    usage_today_text,
)
from bots.discord.access import ADMIN_TEXT, is_admin
from bots.discord.buttons import DYNAMIC_ITEMS
from bots.discord.events import (
    DM,
    MAX_ATTACHMENTS,
    ButtonPress,
    DiscordFile,
    DiscordMessage,
    Ignored,
    IgnoreReason,
    InteractionContext,
    OptionValue,
    ParsedMessage,
    SlashCommand,
    conversation_key,
    parse_interaction,
    parse_message,
)
from bots.discord.memberships import DmMemberships
from bots.discord.payloads import interaction_payload, message_payload
from bots.discord.surface import EDIT_INTERVAL_S, DiscordSurface, DiscordSurfaces
from bots.incoming import Attachment, BackfillMessage, Incoming
from bots.journal import EventJournal, Replay
from bots.memory import MemoryCommand, run_memory_command
from bots.runner import STALE_STOP_TEXT, ConversationRunner
from bots.scheduler import SCHEDULED_BY, StartedThread
from bots.settings import DiscordSettings, Settings, SettingsError
from core.messages import Author

log = logging.getLogger(__name__)

DISCORD_RULES = """\
You are talking with people in Discord. Your reply is rendered as Discord Markdown: short \
paragraphs, `-` lists, **bold**, fenced code blocks with a language; no tables and no headings \
deeper than ###. Messages are split at 2,000 characters, so keep answers focused."""

MAX_BACKFILL = 50  # earlier messages of an existing thread given to a new conversation
MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024
RECENT_DELIVERIES = 10_000  # gateway re-deliveries seen lately, before the durable claim
THREAD_NAME_CHARS = 90
THREAD_EXISTS = 160004  # "A thread has already been created for this message"
NOT_HERE_TEXT = "There's no conversation here yet: mention me or use /ask."
STOPPED_TEXT = "Stopped."
IDLE_TEXT = "Nothing is running here."
RESTARTING_TEXT = "I'm restarting; ask again in a minute."
FEEDBACK_TEXT = "Thanks for the feedback."
UNKNOWN_RUN_TEXT = "I no longer know that answer, so the vote was not kept."
# An /ask is written down before it is deferred (the defer is its ack; docs/architecture.md,
# "Before the accept"): a crash before it reached the store answers it at the next start.
ASK_JOURNAL_DIR = "discord-asks"  # in the data directory
ASK = "ask"
ASK_JOURNAL_MAX_WAIT_S = 1.5  # of Discord's 3 s before the defer; past it, answered unjournaled
NO_THREADS_TEXT = (
    "I can't start a thread here: I need the Create Public Threads permission in this channel."
)


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
        # The runner's factory for earlier runs' surfaces (recovery), bound to this bot.
        self.surfaces = surfaces or DiscordSurfaces()
        self.surfaces.attach(self)
        self._edit_interval_s = edit_interval_s
        self._clock = clock
        self._wall_clock = wall_clock  # days for /usage
        self._threads: set[str] = set()  # conversation keys of threads Teammate is part of
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._not_ours: OrderedDict[str, None] = OrderedDict()  # keys the store doesn't know
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False  # a graceful stop began: no new conversations or runs
        self.configs = runner.conversations.channel_configs(settings)
        self.memory = runner.conversations.channel_memory(settings.memory, settings.secrets())
        self.journal = EventJournal(settings.data_dir / ASK_JOURNAL_DIR)
        self._replayed = False
        self._add_commands()

    # -- start-up ----------------------------------------------------------------------------

    async def setup_hook(self) -> None:
        self.add_dynamic_items(*DYNAMIC_ITEMS)
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
            for replay in await self.journal.adopt_orphans():
                self._spawn(self._replay_ask(replay))

    async def stop_taking_work(self, *, grace_s: float) -> None:
        """A graceful stop: new messages and `/ask` are no longer taken; messages already
        being handed to the runner are, and answers in progress get up to `grace_s`."""
        self._closing = True
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

    # -- messages ----------------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        if self.user is None or self._closing:
            return
        payload, parent = message_payload(message), _thread_parent(message.channel)
        roles = [str(role.id)] if message.guild and (role := message.guild.self_role) else []

        def parse() -> ParsedMessage:  # its managed role too: `@Teammate` may name either
            return parse_message(
                payload,
                bot_user_id=str(self.user.id) if self.user else "",
                thread_parent=lambda _channel_id: parent,
                known_thread=self._threads.__contains__,
                bot_role_ids=roles,
            )

        parsed = parse()
        unaddressed = isinstance(parsed, Ignored) and parsed.reason is IgnoreReason.NOT_ADDRESSED
        if unaddressed and await self._ours_after_all(message, parent):
            parsed = parse()
        if isinstance(parsed, Ignored):
            log.debug("message %s ignored: %s", message.id, parsed.reason)
            return
        if not self._first_delivery(parsed.delivery_id):
            return
        self._spawn(self._answer_message(message, parsed))

    async def _ours_after_all(self, message: discord.Message, parent: str | None) -> bool:
        """Whether a message in a thread, or a reply, belongs to a conversation of ours that
        this process has not seen yet (from before a restart). Asks the store once per key;
        a plain channel message costs nothing."""
        keys: list[str] = []
        if parent is not None:
            keys.append(conversation_key(_guild_id(message), str(message.channel.id)))
        reference = message.reference
        if reference is not None and reference.message_id is not None:
            keys.append(conversation_key(_guild_id(message), str(reference.message_id)))
        found = False
        for key in keys:
            if key in self._not_ours:
                continue
            if await self.runner.conversations.known(key):
                self._threads.add(key)
                found = True
            else:
                self._not_ours[key] = None
                while len(self._not_ours) > RECENT_DELIVERIES:
                    self._not_ours.popitem(last=False)
        return found

    async def _answer_message(self, message: discord.Message, parsed: DiscordMessage) -> None:
        refusal = await self.memberships.refusal_for(
            parsed.person, guild_id=parsed.guild_id, channel_id=parsed.parent_channel_id
        )
        if refusal is not None:
            # Ignored without a word: only slash commands get a (private) note.
            log.info("ignored %s in %s: %s", parsed.person.user_id, parsed.channel_key, refusal)
            return
        key = parsed.conversation_key
        if parsed.stop_requested:
            result = self.runner.stop(key, by=parsed.person.author())
            await message.reply(STOPPED_TEXT if result == "stopped" else IDLE_TEXT)
            return
        thread: discord.abc.MessageableChannel = message.channel
        if parsed.opens_thread and isinstance(message.channel, discord.TextChannel):
            try:  # a voice or stage channel's text chat has no threads: answered in place
                thread = await self._thread_from(message, parsed.text or "a question")
            except discord.Forbidden:
                log.warning("no permission to create threads in %s", parsed.channel_key)
                await message.reply(NO_THREADS_TEXT, mention_author=False)
                return
        backfill: tuple[BackfillMessage, ...] = ()
        if await self._is_new_thread_conversation(parsed):
            backfill = await self._backfill(message)
        self._threads.add(key)
        self._not_ours.pop(key, None)
        attachments = await self._download(message, parsed.files)
        incoming = parsed.to_incoming(
            attachments=attachments, backfill=backfill, title=_title(message.channel)
        )
        surface = DiscordSurface(
            thread,
            channel_id=thread.id,
            conversation_channel_id=parsed.thread_id,
            reply_to=message,
            clock=self._clock,
            edit_interval_s=self._edit_interval_s,
        )
        await self.runner.submit(incoming, surface)

    async def _is_new_thread_conversation(self, parsed: DiscordMessage) -> bool:
        """A mention in an existing thread that has no conversation yet: worth a backfill."""
        if not parsed.mentioned or parsed.is_dm or parsed.opens_thread:
            return False
        key = parsed.conversation_key
        return key not in self._threads and not await self.runner.conversations.known(key)

    async def _thread_from(
        self, message: discord.Message | discord.PartialMessage, text: str
    ) -> discord.Thread:
        name = " ".join(text.split())[:THREAD_NAME_CHARS] or "Teammate"
        try:
            return await message.create_thread(name=name)
        except discord.HTTPException as exc:
            if exc.code != THREAD_EXISTS:
                raise
            # Started already (a re-delivered message): a thread has its message's id.
            channel = self.get_channel(message.id) or await self.fetch_channel(message.id)
            assert isinstance(channel, discord.Thread)
            return channel

    async def _backfill(self, message: discord.Message) -> tuple[BackfillMessage, ...]:
        """The thread's earlier messages, oldest first (bounded), for a new conversation."""
        earlier: list[BackfillMessage] = []
        me = self.user.id if self.user is not None else None
        async for previous in message.channel.history(limit=MAX_BACKFILL, before=message):
            if not previous.content.strip():
                continue
            earlier.append(
                BackfillMessage(
                    author=Author(id=str(previous.author.id), name=previous.author.display_name),
                    text=previous.content[:4_000],
                    timestamp=previous.created_at.timestamp(),
                    platform_message_id=str(previous.id),
                    from_assistant=previous.author.id == me,
                )
            )
        return tuple(reversed(earlier))

    async def _download(
        self, message: discord.Message, files: tuple[DiscordFile, ...]
    ) -> tuple[Attachment, ...]:
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

    # -- slash commands ----------------------------------------------------------------------

    def _add_commands(self) -> None:
        @app_commands.command(name="ask", description="Ask Teammate something")
        @app_commands.describe(prompt="What you want to ask")
        async def ask(interaction: discord.Interaction[Any], prompt: str) -> None:
            await self._ask(interaction)

        @app_commands.command(name="stop", description="Stop Teammate's answer here")
        async def stop(interaction: discord.Interaction[Any]) -> None:
            await self._simple(interaction, "stop")

        @app_commands.command(name="new", description="Start a fresh conversation here")
        async def new(interaction: discord.Interaction[Any]) -> None:
            await self._simple(interaction, "new")

        @app_commands.command(name="usage", description="What this channel used today (UTC)")
        async def usage(interaction: discord.Interaction[Any]) -> None:
            await self._simple(interaction, "usage")

        @app_commands.command(name="reset", description="Forget this conversation's history")
        async def reset(interaction: discord.Interaction[Any]) -> None:
            await self._simple(interaction, "reset")

        group = app_commands.Group(name="teammate", description="Teammate's settings")

        @group.command(name="config", description="Show or change this channel's settings")
        @app_commands.describe(
            prompt="Extra instructions for this channel ('clear' removes them)",
            model="The model here ('default': the configuration file's)",
            tools="Tools here, e.g. read,grep ('none'; 'default': the file's)",
            reset="Forget everything set here",
            timezone="Time zone for scheduled work, e.g. Europe/Berlin ('default': the file's)",
        )
        async def config(
            interaction: discord.Interaction[Any],
            prompt: str | None = None,
            model: str | None = None,
            tools: str | None = None,
            reset: bool = False,
            timezone: str | None = None,
        ) -> None:
            await self._config(interaction)

        @group.command(name="memory", description="This channel's memory: list, add, forget")
        @app_commands.describe(
            add="A note to keep for this channel",
            forget="The id of a note to forget",
            clear="Forget every note (admins)",
        )
        async def memory(
            interaction: discord.Interaction[Any],
            add: str | None = None,
            forget: int | None = None,
            clear: bool = False,
        ) -> None:
            await self._memory(interaction)

        commands_: list[app_commands.Command[Any, ..., None]] = [ask, stop, new, usage, reset]
        for command in commands_:
            self.tree.add_command(command)
        self.tree.add_command(group)

    def _context(self, interaction: discord.Interaction[Any]) -> SlashCommand | None:
        parsed = parse_interaction(interaction_payload(interaction))
        return parsed if isinstance(parsed, SlashCommand) else None

    async def _refused(
        self, interaction: discord.Interaction[Any], context: InteractionContext
    ) -> bool:
        refusal = await self.memberships.refusal_for(
            context.person, guild_id=context.guild_id, channel_id=context.parent_channel_id
        )
        if refusal is not None:
            await interaction.response.send_message(refusal, ephemeral=True)
            return True
        return False

    async def _ask(self, interaction: discord.Interaction[Any]) -> None:
        command = self._context(interaction)
        if command is None or command.name != "ask":
            await interaction.response.send_message("I couldn't read that command.", ephemeral=True)
            return
        context = command.context
        if await self._refused(interaction, context):
            return
        if not self._first_delivery(context.delivery_id):
            return
        if self._closing:
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
            await self.journal.done(entry)

    async def _write_down(self, interaction: discord.Interaction[Any]) -> int | None:
        """The /ask in the journal (fsynced), or None if that took too long or failed: then
        it is answered all the same, only not across a crash."""
        try:
            async with asyncio.timeout(ASK_JOURNAL_MAX_WAIT_S):
                return await self.journal.record(ASK, interaction_payload(interaction))
        except (TimeoutError, OSError) as exc:
            log.warning(
                "an /ask was not written down (%s): a crash before it is stored loses it", exc
            )
            return None

    async def _replay_ask(self, replay: Replay) -> None:
        """An /ask a crashed process deferred and had not stored: find its "thinking…"
        response through the interaction's token (alive 15 minutes) and answer it there. One
        never deferred, or older than the token, is given up: the person saw it fail."""
        command = parse_interaction(replay.body)
        token, application_id = replay.body.get("token"), replay.body.get("application_id")
        if not isinstance(command, SlashCommand) or not token or not application_id:
            await self.journal.done(replay.entry)
            return
        context = command.context
        route = discord.http.Route(
            "GET",
            "/webhooks/{webhook_id}/{webhook_token}/messages/@original",
            webhook_id=application_id,
            webhook_token=token,
        )
        try:
            shown = await self.http.request(route)
            channel = self.get_channel(int(context.channel_id)) or await self.fetch_channel(
                int(context.channel_id)
            )
        except discord.HTTPException as exc:
            log.warning("an /ask from before a restart is gone (%s); not answered", exc.status)
            await self.journal.done(replay.entry)
            return
        log.info("answering an /ask from before a restart (interaction %s)", context.delivery_id)
        if isinstance(channel, discord.TextChannel | discord.Thread | discord.DMChannel):
            original = channel.get_partial_message(int(shown["id"]))
            await self._answer_ask(command, channel, original, None)
        await self.journal.done(replay.entry)

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
        context = command.context
        if channel is None or not isinstance(channel, discord.abc.Messageable):
            return
        conversation_channel = channel
        head_channel: discord.abc.Messageable | None = None
        thread_id = context.channel_id
        if not context.is_dm and not context.in_thread and isinstance(channel, discord.TextChannel):
            # The conversation continues in a thread started from the answer.
            try:
                thread = await self._thread_from(original, command.prompt)
            except discord.Forbidden:
                log.warning("no permission to create threads in %s", context.channel_key)
                if interaction is not None:
                    await interaction.edit_original_response(content=NO_THREADS_TEXT)
                else:
                    await original.edit(content=NO_THREADS_TEXT)
                return
            conversation_channel, head_channel, thread_id = thread, channel, str(thread.id)
        key = conversation_key(context.guild_id, thread_id)
        self._threads.add(key)
        self._not_ours.pop(key, None)
        incoming = Incoming(
            conversation_key=key,
            channel_key=context.channel_key,
            author=context.person.author(),
            text=command.prompt,
            delivery_id=context.delivery_id,
            timestamp=context.timestamp,
            platform_message_id=context.interaction_id,
            title=_title(channel),
        )
        surface = DiscordSurface(
            conversation_channel,
            channel_id=int(thread_id),
            conversation_channel_id=thread_id,
            interaction=interaction,
            head_id=original.id,
            head_channel=head_channel,
            clock=self._clock,
            edit_interval_s=self._edit_interval_s,
        )
        await self.runner.submit(incoming, surface)

    async def _simple(
        self, interaction: discord.Interaction[Any], name: Literal["stop", "new", "usage", "reset"]
    ) -> None:
        command = self._context(interaction)
        if command is None:
            await interaction.response.send_message("I couldn't read that command.", ephemeral=True)
            return
        context = command.context
        if await self._refused(interaction, context):
            return
        key = context.conversation_key
        text = await self._run_simple(name, key, context)
        await interaction.response.send_message(text, ephemeral=True)

    async def _run_simple(self, name: str, key: str, context: InteractionContext) -> str:
        if name == "stop":
            result = self.runner.stop(key, by=context.person.author())
            return STOPPED_TEXT if result == "stopped" else IDLE_TEXT
        if name in ("new", "reset"):
            if not (context.is_dm or context.in_thread):
                return NOT_HERE_TEXT
            done = await self.runner.reset(key)
            return (
                "Starting afresh: I won't see the earlier messages here."
                if done
                else "There was nothing to forget here."
            )
        summary = await self.runner.conversations.usage_summary(
            utc_day_start(self._wall_clock()), channel_key=context.channel_key
        )
        return "**Today in this channel** " + usage_today_text(summary)

    async def _config(self, interaction: discord.Interaction[Any]) -> None:
        command = self._context(interaction)
        if command is None:
            await interaction.response.send_message("I couldn't read that command.", ephemeral=True)
            return
        if not is_admin(self.config, command.context.person):
            await interaction.response.send_message(ADMIN_TEXT, ephemeral=True)
            return
        channel_key = command.context.channel_key
        change = _config_change(dict(command.options))
        if change.empty:
            stored = await self.configs.current(channel_key)
            text = config_text(channel_key, describe(self.settings, channel_key, stored))
        else:
            problem, stored = await self.configs.change(
                channel_key, change, by=command.context.person.user_id
            )
            shown = config_text(channel_key, describe(self.settings, channel_key, stored))
            text = problem or "Saved; it applies from the next answer.\n" + shown
        await interaction.response.send_message(text[:2_000], ephemeral=True)

    async def _memory(self, interaction: discord.Interaction[Any]) -> None:
        command = self._context(interaction)
        if command is None or command.name != "memory":
            await interaction.response.send_message("I couldn't read that command.", ephemeral=True)
            return
        context = command.context
        if await self._refused(interaction, context):
            return
        text = await run_memory_command(
            self.memory,
            context.channel_key,
            _memory_command(dict(command.options)),
            user_id=context.person.user_id,
            is_admin=is_admin(self.config, context.person),
        )
        await interaction.response.send_message(text[:2_000], ephemeral=True)

    # -- scheduled work (bots.scheduler.ThreadStarter) ----------------------------------------

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
            thread = await self._thread_from(posted, text)
            where, thread_id = thread, str(thread.id)
        key = conversation_key(None if guild == DM else guild, thread_id)
        self._threads.add(key)
        surface = DiscordSurface(
            where,
            channel_id=int(thread_id),
            conversation_channel_id=thread_id,
            clock=self._clock,
            edit_interval_s=self._edit_interval_s,
        )
        return StartedThread(key, surface, title=_title(channel))

    # -- buttons (bots.discord.buttons.ButtonHandler) ------------------------------------------

    async def on_stop_button(
        self, interaction: discord.Interaction[Any], run_id: int, channel_id: str | None
    ) -> None:
        parsed = parse_interaction(interaction_payload(interaction))
        if not isinstance(parsed, ButtonPress):
            await interaction.response.send_message(STALE_STOP_TEXT, ephemeral=True)
            return
        if await self._refused(interaction, parsed.context):
            return
        key = parsed.conversation_key
        if key != parsed.context.conversation_key and (
            await self.runner.conversations.channel_of(key) != parsed.context.channel_key
        ):  # a button naming a conversation of another channel: forged
            await interaction.response.send_message(STALE_STOP_TEXT, ephemeral=True)
            return
        result = self.runner.stop(
            parsed.conversation_key, run_id, by=parsed.context.person.author()
        )
        text = STOPPED_TEXT if result == "stopped" else STALE_STOP_TEXT
        await interaction.response.send_message(text, ephemeral=True)

    async def on_feedback_button(
        self, interaction: discord.Interaction[Any], run_id: int, vote: Literal["up", "down"]
    ) -> None:
        user_id = str(interaction.user.id)
        parsed = parse_interaction(interaction_payload(interaction))
        if not isinstance(parsed, ButtonPress):
            await interaction.response.send_message(UNKNOWN_RUN_TEXT, ephemeral=True)
            return
        if await self._refused(interaction, parsed.context):
            return
        try:
            # Stored with the run (one vote per person, a new one replaces it): /usage counts it.
            # Only a run of the channel pressed in: an id naming another channel's is forged.
            await self.runner.conversations.set_feedback(
                run_id, user_id, vote, channel_keys=[parsed.context.channel_key]
            )
        except (KeyError, ValueError):
            log.warning("feedback for unknown run %s ignored", run_id)
            await interaction.response.send_message(UNKNOWN_RUN_TEXT, ephemeral=True)
            return
        log.info("feedback on run %s from %s: %s", run_id, user_id, vote)
        await interaction.response.send_message(FEEDBACK_TEXT, ephemeral=True)

    # -- helpers -----------------------------------------------------------------------------

    def _first_delivery(self, delivery_id: str) -> bool:
        """False for a gateway re-delivery seen lately (the runner's claim is the durable one;
        this only spares a second thread or a second defer)."""
        if delivery_id in self._recent:
            return False
        self._recent[delivery_id] = None
        while len(self._recent) > RECENT_DELIVERIES:
            self._recent.popitem(last=False)
        return True

    def _spawn(self, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("handling a Discord message failed", exc_info=task.exception())


# -- helpers ----------------------------------------------------------------------------------


def config_text(channel_key: str, view: ConfigView) -> str:
    return "\n".join(
        [
            f"**This channel's configuration** (`{channel_key}`)",
            f"- model: {view.model}",
            f"- extra instructions: {view.prompt}",
            f"- tools: {view.tools}",
            f"- time zone (scheduled work): {view.timezone}",
            "Change it with `/teammate config` and its options `prompt`, `model`, `tools`, "
            "`timezone`, `reset`.",
        ]
    )


def _config_change(options: dict[str, OptionValue]) -> ConfigChange:
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


def _guild_id(message: discord.Message) -> str | None:
    return str(message.guild.id) if message.guild is not None else None


def _thread_parent(channel: object) -> str | None:
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id)
    return None


def _title(channel: object) -> str | None:
    name = getattr(channel, "name", None)
    return f"#{name}" if isinstance(name, str) else None


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
