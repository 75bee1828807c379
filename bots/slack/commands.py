"""The slash command (default `/teammate`): help, usage, stop, reset, and config for admins.

Owns: parsing the command's text, what each subcommand does (through the runner and the
store's contract, never SQL), and the ephemeral answers. Slack wants an acknowledgement within
3 s: an answer ready within `ANSWER_WITHIN_S` is the acknowledgement itself; a slower one
(resetting a channel with many threads) is acknowledged with "working on it" and sent later
through the command's `response_url`.

Slash commands never arrive from inside a thread (Slack does not offer them there), so every
subcommand acts on the channel: `stop` stops every answer in progress in it, `reset` makes
Teammate forget its threads. In a thread, `@teammate stop` works instead.

A channel's configuration (`config`) is kept in the store (`set_channel_config`) and layered
over the configuration file by the runner for every new run (`bots.settings.ChannelConfig`):
stored tools can only narrow what the file allows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bots.access import access_refusal
from bots.budgets import utc_day_start
from bots.channel_config import (
    ConfigChange,
    allowed_tools,
    describe,
)
from bots.incoming import Incoming
from bots.memory import parse_memory_words, run_memory_command
from bots.runner import ConversationRunner
from bots.settings import ChannelConfig, Settings
from core.messages import Author, Usage

log = logging.getLogger(__name__)

ANSWER_WITHIN_S = 2.0  # Slack gives 3 s; the rest is for the network
MAX_RESET_CONVERSATIONS = 10_000
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
    """The subcommands over one runner; `answer` is what the listener acknowledges with."""

    def __init__(
        self,
        runner: ConversationRunner,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.settings = settings
        self._clock = clock
        self._configs = runner.conversations.channel_configs(settings)  # one change at a time
        self._memory = runner.conversations.channel_memory(settings.memory, settings.secrets())

    async def answer(self, invocation: Invocation) -> str:
        refusal = self._refusal(invocation)
        if refusal is not None:
            return refusal
        word, _, rest = invocation.text.strip().partition(" ")
        word = word.lower()
        if word in ("", "help"):
            return help_text(invocation.command)
        if word == "usage":
            return await self._usage(invocation)
        if word == "stop":
            return self._stop(invocation)
        if word == "reset":
            return await self._reset(invocation)
        if word == "config":
            return await self._config(invocation, rest.strip())
        if word == "memory":
            return await self._memory_command(invocation, rest)
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

    async def _usage(self, invocation: Invocation) -> str:
        summary = await self.runner.conversations.usage_summary(
            utc_day_start(self._clock()), channel_key=invocation.channel_key
        )
        answers = "answer" if summary.runs == 1 else "answers"
        return (
            f"*Today in this channel* (since midnight UTC): {summary.runs} {answers} · "
            f"{_tokens(summary.usage)} · {_dollars(summary.usage.cost)} · "
            f"👍 {summary.votes_up} 👎 {summary.votes_down}"
        )

    def _stop(self, invocation: Invocation) -> str:
        stopped = 0
        for key in self.runner.running_in(invocation.channel_key):
            if self.runner.stop(key, by=invocation.user) == "stopped":
                stopped += 1
        if stopped == 0:
            return "Nothing is in progress in this channel."
        return f"Stopped {stopped} answer{'s' if stopped != 1 else ''} in this channel."

    async def _reset(self, invocation: Invocation) -> str:
        keys = await self.runner.conversations.keys_in_channel(
            invocation.channel_key, limit=MAX_RESET_CONVERSATIONS
        )
        reset = 0
        for key in keys:
            if await self.runner.reset(key):
                reset += 1
        if reset == 0:
            return "There was nothing to forget in this channel."
        threads = "thread" if reset == 1 else "threads"
        return (
            f"Done: I've forgotten {reset} {threads} here; the next message in any of them "
            "starts afresh. (Their history is kept, just no longer sent to the model.)"
        )

    async def _memory_command(self, invocation: Invocation, rest: str) -> str:
        parsed = parse_memory_words(rest)
        if isinstance(parsed, str):
            return parsed.replace("`memory", f"`{invocation.command} memory")
        return await run_memory_command(
            self._memory,
            invocation.channel_key,
            parsed,
            user_id=invocation.user.id,
            is_admin=invocation.user.id in self.settings.slack.admins,
        )

    # -- config ------------------------------------------------------------------------------

    async def _config(self, invocation: Invocation, rest: str) -> str:
        if invocation.user.id not in self.settings.slack.admins:
            return (
                "Only Teammate's admins can see or change a channel's configuration "
                "(`[slack] admins` in the configuration file)."
            )
        field, _, value = rest.partition(" ")
        field, value = field.lower(), value.strip()
        key = invocation.channel_key
        if field in ("", "show"):
            return self._show(invocation, await self._configs.current(key))
        hint = _CONFIG_HINTS.get(field)
        if hint is None and field != "reset":
            return f"I can't configure `{_short(field, 40)}`.\n" + self._usage_of_config(
                invocation.command
            )
        if hint is not None and not value:
            allowed = ", ".join(allowed_tools(self.settings, key)) or "none"
            return hint.format(allowed=allowed)
        change = ConfigChange(
            reset=field == "reset",
            prompt=value if field == "prompt" else None,
            model=value if field == "model" else None,
            tools=value if field == "tools" else None,
            timezone=value if field == "timezone" else None,
        )
        problem, changed = await self._configs.change(key, change, by=invocation.user.id)
        if problem:
            return problem
        return "Saved; it applies from the next answer.\n" + self._show(invocation, changed)

    def _show(self, invocation: Invocation, stored: ChannelConfig) -> str:
        view = describe(self.settings, invocation.channel_key, stored)
        model, prompt, tools = view.model, view.prompt, view.tools
        return "\n".join(
            [
                "*This channel's configuration*",
                f"• model: {model}",
                f"• extra instructions: {prompt}",
                f"• tools: {tools}",
                f"• time zone (scheduled work): {view.timezone}",
                self._usage_of_config(invocation.command),
            ]
        )

    @staticmethod
    def _usage_of_config(command: str) -> str:
        return (
            f"Change it with `{command} config model <id>|default`, `config prompt "
            "<text>|clear`, `config tools <a,b>|none|default`, `config timezone "
            "<zone>|default`, or `config reset`."
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


def _tokens(usage: Usage) -> str:
    cached = usage.cache_read + usage.cache_write
    read = usage.input + cached
    extra = f" ({cached:,} of them cached)" if cached else ""
    return f"{read:,} tokens read{extra}, {usage.output:,} written"


def _dollars(cost: float) -> str:
    """Cents once it matters; small sums with enough digits to be seen at all."""
    return f"${cost:.2f}" if cost >= 0.1 or cost == 0 else f"${cost:.4f}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
