"""The slash command (default `/teammate`): help, usage, stop, reset, memory, and config for
admins, on Slack.

Owns: reading the command's payload and text into a `bots.features.commands.CommandPlace` and the
subcommand's arguments (the help, and the notes on words it cannot read), Slack's `Markup`,
and the ephemeral answers. What each subcommand does and says is `bots.features.commands`. Slack
wants an acknowledgement within 3 s: an answer ready within `ANSWER_WITHIN_S` is the
acknowledgement itself; a slower one (resetting a channel with many threads) is acknowledged
with "working on it" and sent later through the command's `response_url`.

Slash commands never arrive from inside a thread (Slack does not offer them there), so every
subcommand acts on the channel: `stop` stops every answer in progress in it, `reset` makes
Teammate forget its threads. In a thread, `@teammate stop` works instead.

Must not: act on the store or the runner itself (`bots.features.commands` does), or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bots.access import access_refusal
from bots.features.channel_config import ConfigChange, allowed_tools
from bots.features.commands import ChannelCommands, CommandPlace, Markup
from bots.features.memory import parse_memory_words
from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import Author

log = logging.getLogger(__name__)

ANSWER_WITHIN_S = 2.0  # Slack gives 3 s; the rest is for the network
WORKING_TEXT = "Working on it…"

Spawn = Callable[[Coroutine[Any, Any, None], str], None]


# What each `config` field wants, when it is given without a value.
_CONFIG_HINTS = {
    "prompt": "Give the instructions: `config prompt <text>` (or `config prompt clear`).",
    "model": "Name the model: `config model <id>` (or `config model default`).",
    "tools": "List the tools: `config tools read,grep` (allowed here: {allowed}), "
    "`config tools none` or `config tools default`.",
    "timezone": "Name the time zone for scheduled work: `config timezone Europe/Berlin` (or "
    "`config timezone default`).",
}


@dataclass(slots=True, frozen=True)
class Invocation:
    """What the command's payload says, checked: who, where, and the words after it."""

    command: str
    text: str
    user: Author
    team_id: str
    channel_id: str

    @property
    def channel_key(self) -> str:
        return f"slack:{self.team_id}:{self.channel_id}"

    @property
    def is_dm(self) -> bool:
        return self.channel_id.startswith("D")


def slack_markup(command: str) -> Markup:
    """Slack's mrkdwn, and `command`'s words for changing a configuration."""
    return Markup(
        bold="*",
        bullet="•",
        config_usage=(
            f"Change it with `{command} config model <id>|default`, `config prompt "
            "<text>|clear`, `config tools <a,b>|none|default`, `config timezone "
            "<zone>|default`, or `config reset`."
        ),
        admin_text="Only Teammate's admins can see or change a channel's configuration "
        "(`[slack] admins` in the configuration file).",
    )


def help_text(command: str) -> str:
    return "\n".join(
        [
            "*Teammate*: mention me (`@teammate …`) in a channel and I answer in the thread; "
            "reply in that thread to continue. Direct messages work too.",
            f"• `{command} usage`: what this channel used today (UTC): answers, tokens, cost, "
            "👍/👎",
            f"• `{command} stop`: stop every answer in progress in this channel",
            f"• `{command} reset`: forget this channel's threads (the next message starts afresh)",
            f"• `{command} config`: show or change this channel's model, tools and extra "
            "instructions (admins)",
            f"• `{command} memory`: the notes I keep for this channel; `memory add <text>`, "
            "`memory forget <id>`, `memory clear` (admins)",
            f"Slash commands don't work inside threads: there, write `@teammate stop` to stop "
            f"the answer in progress. Every answer to `{command}` is visible only to you.",
        ]
    )


class SlashCommands:
    """The subcommands over one runner; `answer` is what the listener acknowledges with.
    What each does is `bots.features.commands.ChannelCommands`; this reads the words after it."""

    def __init__(
        self,
        runner: ConversationRunner,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._markup = slack_markup(settings.slack.command)
        self._commands = ChannelCommands(runner, settings, self._markup, clock=clock)

    async def answer(self, invocation: Invocation) -> str:
        refusal = self._refusal(invocation)
        if refusal is not None:
            return refusal
        word, _, rest = invocation.text.strip().partition(" ")
        word = word.lower()
        place = CommandPlace(
            channel_key=invocation.channel_key,
            conversation_key=None,  # Slack offers slash commands in channels only
            by=invocation.user,
            is_admin=invocation.user.id in self.settings.slack.admins,
        )
        if word in ("", "help"):
            return help_text(invocation.command)
        if word == "usage":
            return await self._commands.usage(place)
        if word == "stop":
            return await self._commands.stop(place)
        if word == "reset":
            return await self._commands.reset(place)
        if word == "config":
            return await self._commands.config(place, self._config_change(place, rest.strip()))
        if word == "memory":
            parsed = parse_memory_words(rest)
            if isinstance(parsed, str):
                return parsed.replace("`memory", f"`{invocation.command} memory")
            return await self._commands.memory(place, parsed)
        return f"I don't know `{_short(word, 40)}`.\n" + help_text(invocation.command)

    def _refusal(self, invocation: Invocation) -> str | None:
        if invocation.is_dm and not self.settings.slack.dms_enabled:
            return "Direct messages with Teammate are turned off in this workspace."
        probe = Incoming(
            conversation_key=invocation.channel_key,
            channel_key=invocation.channel_key,
            author=invocation.user,
            text="",
            delivery_id="",
            timestamp=self._clock(),
        )
        return access_refusal(self.settings, probe)

    def _config_change(self, place: CommandPlace, rest: str) -> ConfigChange | str:
        """`config [show]`, `config <field> <value>`, `config reset`; else what to write."""
        field, _, value = rest.partition(" ")
        field, value = field.lower(), value.strip()
        if field in ("", "show"):
            return ConfigChange()
        hint = _CONFIG_HINTS.get(field)
        if hint is None and field != "reset":
            return f"I can't configure `{_short(field, 40)}`.\n" + self._markup.config_usage
        if hint is not None and not value:
            allowed = ", ".join(allowed_tools(self.settings, place.channel_key)) or "none"
            return hint.format(allowed=allowed)
        return ConfigChange(
            reset=field == "reset",
            prompt=value if field == "prompt" else None,
            model=value if field == "model" else None,
            tools=value if field == "tools" else None,
            timezone=value if field == "timezone" else None,
        )


def register_commands(
    bolt: Any,
    *,
    runner: ConversationRunner,
    settings: Settings,
    spawn: Spawn | None = None,
    clock: Callable[[], float] = time.time,
) -> SlashCommands:
    """Answer `settings.slack.command` on a bolt `AsyncApp`. `spawn(work, name)` runs an
    answer that was not ready in time (default: a plain task)."""
    commands = SlashCommands(runner, settings, clock=clock)
    name = settings.slack.command

    async def on_command(ack: Any, command: dict[str, Any], respond: Any) -> None:
        invocation = _invocation(command, name)
        if invocation is None:
            await ack(response_type="ephemeral", text="That command came without a user.")
            return
        work = asyncio.ensure_future(commands.answer(invocation))
        try:
            text = await asyncio.wait_for(asyncio.shield(work), ANSWER_WITHIN_S)
        except TimeoutError:
            await ack(response_type="ephemeral", text=WORKING_TEXT)
            later = _respond_later(work, respond)
            if spawn is not None:
                spawn(later, f"slash command {name}")
            else:
                _background(later)
            return
        except Exception:
            log.exception("%s failed", name)
            text = "Sorry, that failed (details in Teammate's log)."
        await ack(response_type="ephemeral", text=text)

    bolt.command(name)(on_command)
    return commands


async def _respond_later(work: asyncio.Future[str], respond: Any) -> None:
    try:
        text = await work
    except Exception:
        log.exception("a slash command failed after its acknowledgement")
        text = "Sorry, that failed (details in Teammate's log)."
    await respond(text=text, response_type="ephemeral", replace_original=False)


_tasks: set[asyncio.Task[None]] = set()


def _background(work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.create_task(work)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def _invocation(command: dict[str, Any], name: str) -> Invocation | None:
    user_id = command.get("user_id")
    channel_id = command.get("channel_id")
    team_id = command.get("team_id")
    if not all(isinstance(v, str) and v for v in (user_id, channel_id, team_id)):
        return None
    assert isinstance(user_id, str) and isinstance(channel_id, str) and isinstance(team_id, str)
    user_name = command.get("user_name")
    text = command.get("text")
    return Invocation(
        command=name,
        text=text[:8000] if isinstance(text, str) else "",
        user=Author(id=user_id, name=user_name if isinstance(user_name, str) else user_id),
        team_id=team_id,
        channel_id=channel_id,
    )


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
