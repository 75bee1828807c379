"""Discord interactions, translated: our slash commands and buttons, or a named reason to
ignore one.

Owns: `parse_interaction` (an `INTERACTION_CREATE` payload's `d`), its results
(`InteractionContext`, `SlashCommand`, `ButtonPress`), and the custom ids of our buttons
(`stop_custom_id`, `feedback_custom_id`, `parse_custom_id`). Pure: no IO. Payloads are
hostile input: whatever the shape, the answer is a result, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from bots.platforms.discord.payload_fields import (
    TRUNCATION_NOTE,
    Ignored,
    IgnoreReason,
    Person,
    conversation_key,
    person_of,
    snowflake_id,
    snowflake_time,
)

__all__ = [
    "MAX_PROMPT_CHARS",
    "ButtonPress",
    "CommandName",
    "InteractionContext",
    "OptionValue",
    "ParsedInteraction",
    "SlashCommand",
    "feedback_custom_id",
    "parse_custom_id",
    "parse_interaction",
    "stop_custom_id",
]

MAX_OPTIONS = 25  # Discord's cap on a command's options
MAX_OPTION_CHARS = 6_000  # a string option holds at most 6,000 characters
MAX_PROMPT_CHARS = MAX_OPTION_CHARS

_THREAD_CHANNEL_TYPES = frozenset({10, 11, 12})  # announcement, public and private threads
_DM_CHANNEL_TYPES = frozenset({1, 3})
_INTERACTION_COMMAND = 2
_INTERACTION_COMPONENT = 3
_COMPONENT_BUTTON = 2
_OPTION_SUBCOMMAND = 1
_OPTION_SCALARS = frozenset({3, 4, 5, 10})  # string, integer, boolean, number

CommandName: TypeAlias = Literal["ask", "stop", "new", "usage", "reset", "config", "memory"]
_SIMPLE_COMMANDS: dict[str, CommandName] = {
    "ask": "ask",
    "stop": "stop",
    "new": "new",
    "usage": "usage",
    "reset": "reset",
}
OptionValue: TypeAlias = str | int | float | bool


@dataclass(slots=True, frozen=True)
class InteractionContext:
    """What every interaction carries: who, where, and how to answer it."""

    interaction_id: str
    application_id: str
    token: str
    guild_id: str | None
    channel_id: str
    parent_channel_id: str  # the thread's parent, else the channel itself
    in_thread: bool
    person: Person
    timestamp: float

    @property
    def is_dm(self) -> bool:
        return self.guild_id is None

    @property
    def conversation_key(self) -> str:
        """The conversation of the channel it was used in (a thread's, a DM's)."""
        return conversation_key(self.guild_id, self.channel_id)

    @property
    def channel_key(self) -> str:
        return conversation_key(self.guild_id, self.parent_channel_id)

    @property
    def delivery_id(self) -> str:
        return f"discord:interaction:{self.interaction_id}"


@dataclass(slots=True, frozen=True)
class SlashCommand:
    """`/ask prompt:`, `/stop`, `/new`, `/usage`, `/reset`, `/teammate config ...`."""

    name: CommandName
    context: InteractionContext
    prompt: str = ""  # /ask only
    truncated: bool = False
    options: tuple[tuple[str, OptionValue], ...] = ()  # /teammate config and memory only


@dataclass(slots=True, frozen=True)
class ButtonPress:
    """One of our buttons: Stop on a run, 👍/👎 on an answer, or a choice on an approval
    request (`run_id` is then the request's id, `choice` approve, deny or rest)."""

    action: Literal["stop", "feedback", "approval"]
    run_id: int
    context: InteractionContext
    message_id: str | None  # the message the button is on
    vote: Literal["up", "down"] | None = None  # feedback only
    target_channel_id: str | None = None  # stop: the conversation's channel, when named
    choice: Literal["approve", "deny", "rest"] | None = None  # approval only

    @property
    def conversation_key(self) -> str:
        """The run's conversation: the one the button names, else where it was pressed."""
        channel = self.target_channel_id or self.context.channel_id
        return conversation_key(self.context.guild_id, channel)


ParsedInteraction: TypeAlias = SlashCommand | ButtonPress | Ignored


# -- custom ids --------------------------------------------------------------------------------

_STOP_ID = re.compile(r"stop:([0-9]{1,18})(?::([0-9]{1,20}))?")
_FEEDBACK_ID = re.compile(r"feedback:([0-9]{1,18}):(up|down)")
_APPROVAL_ID = re.compile(r"approval:([0-9]{1,18}):(approve|deny|rest)")


def stop_custom_id(run_id: int, channel_id: str | None = None) -> str:
    """The Stop button's persistent id: the run, and the conversation's channel (the thread or
    DM), so a press on an answer outside its thread still stops the right conversation."""
    return f"stop:{run_id}" if channel_id is None else f"stop:{run_id}:{channel_id}"


def feedback_custom_id(run_id: int, vote: Literal["up", "down"]) -> str:
    return f"feedback:{run_id}:{vote}"


def approval_custom_id(approval_id: int, choice: Literal["approve", "deny", "rest"]) -> str:
    return f"approval:{approval_id}:{choice}"


def parse_custom_id(
    custom_id: object,
) -> tuple[Literal["stop", "feedback", "approval"], int, str | None] | None:
    """(action, run or request id, stop's channel id, feedback's vote or an approval's
    choice), or None if not one of ours."""
    if not isinstance(custom_id, str) or len(custom_id) > 100:
        return None
    stop = _STOP_ID.fullmatch(custom_id)
    if stop is not None:
        return "stop", int(stop.group(1)), stop.group(2)
    feedback = _FEEDBACK_ID.fullmatch(custom_id)
    if feedback is not None:
        return "feedback", int(feedback.group(1)), feedback.group(2)
    approval = _APPROVAL_ID.fullmatch(custom_id)
    if approval is not None:
        return "approval", int(approval.group(1)), approval.group(2)
    return None


# -- interactions ------------------------------------------------------------------------------


def parse_interaction(payload: object, *, command_group: str = "teammate") -> ParsedInteraction:
    """Translate one interaction (the gateway event's `d`): our slash commands and buttons.

    `command_group` is the name of the admin group (`/teammate config`).
    """
    if not isinstance(payload, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "payload")
    kind = payload.get("type")
    if type(kind) is not int:
        return Ignored(IgnoreReason.MALFORMED, "type")
    if kind not in (_INTERACTION_COMMAND, _INTERACTION_COMPONENT):
        return Ignored(IgnoreReason.UNSUPPORTED_INTERACTION)
    context = _interaction_context(payload)
    if isinstance(context, Ignored):
        return context
    data = payload.get("data")
    if not isinstance(data, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "data")
    if kind == _INTERACTION_COMMAND:
        return _command(data, context, command_group)
    return _button(payload, data, context)


def _interaction_context(payload: Mapping[object, object]) -> InteractionContext | Ignored:
    interaction_id = snowflake_id(payload.get("id"))
    application_id = snowflake_id(payload.get("application_id"))
    token = payload.get("token")
    if interaction_id is None:
        return Ignored(IgnoreReason.MALFORMED, "id")
    if application_id is None:
        return Ignored(IgnoreReason.MALFORMED, "application_id")
    if not isinstance(token, str) or not 0 < len(token) <= 1_000 or not token.isascii():
        return Ignored(IgnoreReason.MALFORMED, "token")
    raw_guild = payload.get("guild_id")
    guild_id = snowflake_id(raw_guild)
    if raw_guild is not None and guild_id is None:
        return Ignored(IgnoreReason.MALFORMED, "guild_id")
    channel = payload.get("channel")
    channel = channel if isinstance(channel, Mapping) else {}
    channel_id = snowflake_id(payload.get("channel_id")) or snowflake_id(channel.get("id"))
    if channel_id is None:
        return Ignored(IgnoreReason.MALFORMED, "channel_id")
    raw_type = channel.get("type")
    channel_type = raw_type if type(raw_type) is int else None
    in_thread = guild_id is not None and channel_type in _THREAD_CHANNEL_TYPES
    parent_id = snowflake_id(channel.get("parent_id")) if in_thread else None
    if in_thread and parent_id is None:
        return Ignored(IgnoreReason.MALFORMED, "parent_id")
    if guild_id is None and raw_type is not None and channel_type not in _DM_CHANNEL_TYPES:
        return Ignored(IgnoreReason.MALFORMED, "channel")
    member = payload.get("member")
    user = member.get("user") if isinstance(member, Mapping) else payload.get("user")
    if guild_id is not None and not isinstance(member, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "member")
    if not isinstance(user, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "user")
    user_id = snowflake_id(user.get("id"))
    if user_id is None:
        return Ignored(IgnoreReason.MALFORMED, "user")
    if user.get("bot") is True:
        return Ignored(IgnoreReason.BOT_MESSAGE)
    return InteractionContext(
        interaction_id=interaction_id,
        application_id=application_id,
        token=token,
        guild_id=guild_id,
        channel_id=channel_id,
        parent_channel_id=parent_id or channel_id,
        in_thread=in_thread,
        person=person_of(user, member),
        timestamp=snowflake_time(interaction_id),
    )


def _command(
    data: Mapping[object, object], context: InteractionContext, command_group: str
) -> ParsedInteraction:
    name = data.get("name")
    options = _options(data.get("options"))
    if options is None:
        return Ignored(IgnoreReason.MALFORMED, "options")
    if name == command_group:
        # A group's only option is the subcommand, carrying its own options.
        sub = data.get("options")
        if not isinstance(sub, list) or len(sub) != 1 or not isinstance(sub[0], Mapping):
            return Ignored(IgnoreReason.MALFORMED, "options")
        sub_name = sub[0].get("name")
        if sub[0].get("type") != _OPTION_SUBCOMMAND or sub_name not in ("config", "memory"):
            return Ignored(IgnoreReason.UNKNOWN_COMMAND)
        config = _options(sub[0].get("options"))
        if config is None:
            return Ignored(IgnoreReason.MALFORMED, "options")
        return SlashCommand("memory" if sub_name == "memory" else "config", context, options=config)
    if not isinstance(name, str) or name not in _SIMPLE_COMMANDS:
        return Ignored(IgnoreReason.UNKNOWN_COMMAND)
    if name == "ask":
        prompt = dict(options).get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return Ignored(IgnoreReason.EMPTY)
        prompt = prompt.strip()
        truncated = len(prompt) > MAX_PROMPT_CHARS
        if truncated:
            prompt = prompt[:MAX_PROMPT_CHARS] + TRUNCATION_NOTE.format(limit=MAX_PROMPT_CHARS)
        return SlashCommand("ask", context, prompt=prompt, truncated=truncated)
    return SlashCommand(_SIMPLE_COMMANDS[name], context)


def _button(
    payload: Mapping[object, object], data: Mapping[object, object], context: InteractionContext
) -> ParsedInteraction:
    if data.get("component_type") != _COMPONENT_BUTTON:
        return Ignored(IgnoreReason.UNKNOWN_COMPONENT)
    parsed = parse_custom_id(data.get("custom_id"))
    if parsed is None:
        return Ignored(IgnoreReason.UNKNOWN_COMPONENT)
    action, run_id, extra = parsed
    message = payload.get("message")
    message_id = snowflake_id(message.get("id")) if isinstance(message, Mapping) else None
    if action == "stop":
        return ButtonPress("stop", run_id, context, message_id, target_channel_id=extra)
    if action == "approval":
        choice: Literal["approve", "deny", "rest"] = (
            "approve" if extra == "approve" else "deny" if extra == "deny" else "rest"
        )
        return ButtonPress("approval", run_id, context, message_id, choice=choice)
    vote: Literal["up", "down"] = "up" if extra == "up" else "down"
    return ButtonPress("feedback", run_id, context, message_id, vote=vote)


def _options(value: object) -> tuple[tuple[str, OptionValue], ...] | None:
    """A command's scalar options as (name, value); subcommands are skipped here. None when
    the shape is broken."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    found: list[tuple[str, OptionValue]] = []
    for option in value[:MAX_OPTIONS]:
        if not isinstance(option, Mapping):
            return None
        name = option.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= 32:
            return None
        option_type = option.get("type")
        if type(option_type) is not int or option_type not in _OPTION_SCALARS:
            continue
        raw = option.get("value")
        if isinstance(raw, str):
            found.append((name, raw[: MAX_OPTION_CHARS + 1]))
        elif isinstance(raw, bool | int | float) and abs(raw) <= 2**53:  # NaN fails it
            found.append((name, raw))
        else:
            return None
    return tuple(found)
