"""The chat commands every platform offers, written once: usage, stop, reset, memory, config.

Owns: `ChannelCommands`, what each command does (through the runner and its `conversations`
service) and the words of its answer; `CommandPlace`, the neutral invocation a platform parses
its payload into (which channel, which conversation if it was used inside one, who, whether an
admin); `Markup`, the few things a platform writes its own way (bold, bullets, how its
command changes a configuration, where its admins are named).

One rule for where a command acts: used inside a conversation (a thread, a Discord DM) it acts
on that conversation; used in a channel (Slack's slash commands always are: Slack does not
offer them in threads) it acts on every conversation of the channel.

Must not: parse a platform's payload, check a platform's access lists (the adapter refuses
before it calls), send anything, or import `bots.platforms.slack` / `bots.platforms.discord`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bots.budgets import utc_day_start
from bots.features.audit import actor_of, origin_of
from bots.features.channel_config import ConfigChange, describe, usage_today_text
from bots.features.memory import MemoryCommand, run_memory_command
from bots.runner import ConversationRunner
from bots.settings import ChannelConfig, Settings
from core.messages import Author

__all__ = [
    "IDLE_TEXT",
    "STOPPED_TEXT",
    "ChannelCommands",
    "CommandPlace",
    "Markup",
]

MAX_RESET_CONVERSATIONS = 10_000
STOPPED_TEXT = "Stopped."
IDLE_TEXT = "Nothing is running here."
CHANNEL_IDLE_TEXT = "Nothing is in progress in this channel."
SAVED_TEXT = "Saved; it applies from the next answer."


@dataclass(slots=True, frozen=True)
class CommandPlace:
    """Where a command was used and by whom, as the platform's payload said (checked)."""

    channel_key: str
    conversation_key: str | None  # used inside this conversation; None: in the channel itself
    by: Author
    is_admin: bool


@dataclass(slots=True, frozen=True)
class Markup:
    """What a platform writes its own way in the commands' answers."""

    bold: str  # wraps a heading: "*" on Slack, "**" on Discord
    bullet: str  # starts a list item
    config_usage: str  # how this platform's command changes a configuration
    admin_text: str  # refusing `config` to a non-admin, naming the platform's admins setting

    def heading(self, text: str) -> str:
        return f"{self.bold}{text}{self.bold}"


class ChannelCommands:
    """The commands over one runner, for one platform's `Markup`; each returns the text."""

    def __init__(
        self,
        runner: ConversationRunner,
        settings: Settings,
        markup: Markup,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.markup = markup
        self._clock = clock  # days for usage
        self._configs = runner.conversations.channel_configs(settings)  # one change at a time
        self._memory = runner.conversations.channel_memory(settings.memory, settings.secrets())

    async def usage(self, place: CommandPlace) -> str:
        """The channel's day (UTC): answers, tokens, cost, votes."""
        summary = await self.runner.conversations.usage_summary(
            utc_day_start(self._clock()), channel_key=place.channel_key
        )
        return self.markup.heading("Today in this channel") + " " + usage_today_text(summary)

    async def stop(self, place: CommandPlace) -> str:
        """Stop the conversation's answer, or, in a channel, every answer in progress there."""
        if place.conversation_key is not None:
            result = self.runner.stop(place.conversation_key, by=place.by)
            if result == "stopped":
                await self._audit(place, "run.stop", place.conversation_key, {"answers": 1})
            return STOPPED_TEXT if result == "stopped" else IDLE_TEXT
        stopped = 0
        for key in self.runner.running_in(place.channel_key):
            if self.runner.stop(key, by=place.by) == "stopped":
                stopped += 1
        if stopped == 0:
            return CHANNEL_IDLE_TEXT
        await self._audit(place, "run.stop", place.channel_key, {"answers": stopped})
        return f"Stopped {stopped} answer{'s' if stopped != 1 else ''} in this channel."

    async def reset(self, place: CommandPlace) -> str:
        """Start the conversation afresh, or, in a channel, every conversation of it."""
        if place.conversation_key is not None:
            if await self.runner.reset(place.conversation_key):
                await self._audit(place, "conversation.reset", place.conversation_key)
                return "Starting afresh: I won't see the earlier messages here."
            return "There was nothing to forget here."
        keys = await self.runner.conversations.keys_in_channel(
            place.channel_key, limit=MAX_RESET_CONVERSATIONS
        )
        reset = 0
        for key in keys:
            if await self.runner.reset(key):
                reset += 1
        if reset == 0:
            return "There was nothing to forget in this channel."
        await self._audit(place, "conversation.reset", place.channel_key, {"threads": reset})
        threads = "thread" if reset == 1 else "threads"
        return (
            f"Done: I've forgotten {reset} {threads} here; the next message in any of them "
            "starts afresh. (Their history is kept, just no longer sent to the model.)"
        )

    async def memory(self, place: CommandPlace, command: MemoryCommand) -> str:
        """List, add, forget or (admins) clear the channel's notes."""
        changed: list[bool] = []
        text = await run_memory_command(
            self._memory,
            place.channel_key,
            command,
            user_id=place.by.id,
            is_admin=place.is_admin,
            changed=changed,
        )
        if changed and command.action != "list":
            detail = {"note": command.note_id, "text": command.text or None}
            await self._audit(place, f"memory.{command.action}", place.channel_key, detail)
        return text

    async def config(self, place: CommandPlace, change: ConfigChange | str) -> str:
        """Show the channel's configuration (an empty change) or change it; admins only. A
        text instead of a change is the platform's note on words it could not read."""
        if not place.is_admin:
            return self.markup.admin_text
        if isinstance(change, str):
            return change
        key = place.channel_key
        if change.empty:
            return self.config_text(key, await self._configs.current(key))
        problem, stored = await self._configs.change(key, change, by=place.by.id)
        if not problem:
            asked = {
                name: value for name, value in asdict(change).items() if value not in (None, False)
            }
            now = asdict(describe(self.settings, key, stored))
            await self._audit(place, "config.set", key, {"change": asked, "now": now})
        return problem or SAVED_TEXT + "\n" + self.config_text(key, stored)

    async def _audit(
        self, place: CommandPlace, action: str, target: str, detail: dict[str, Any] | None = None
    ) -> None:
        await self.runner.conversations.record_action(
            actor=actor_of(place.channel_key, place.by),
            action=action,
            target=target,
            origin=origin_of(place.channel_key),
            detail={"by_name": place.by.name, **(detail or {})},
            secrets=self.settings.secrets(),
        )

    def config_text(self, channel_key: str, stored: ChannelConfig) -> str:
        view = describe(self.settings, channel_key, stored)
        bullet = self.markup.bullet
        return "\n".join(
            [
                self.markup.heading("This channel's configuration") + f" (`{channel_key}`)",
                f"{bullet} model: {view.model}",
                f"{bullet} extra instructions: {view.prompt}",
                f"{bullet} tools: {view.tools}",
                f"{bullet} time zone (scheduled work): {view.timezone}",
                self.markup.config_usage,
            ]
        )
