"""Discord gateway payloads, translated: a message or command for Teammate, or a named reason
to ignore it.

Owns: `parse_message` (a `MESSAGE_CREATE` / `MESSAGE_UPDATE` payload's `d`) and
`parse_interaction` (an `INTERACTION_CREATE` payload's `d`), their results (`DiscordMessage`,
`SlashCommand`, `ButtonPress`, `Ignored`), and the custom ids of our buttons
(`stop_custom_id`, `feedback_custom_id`, `parse_custom_id`).
Pure: no IO. What needs the client's cache (is this channel a thread, and of which channel? is
this a thread Teammate is part of?) is a callable the adapter passes in. Payloads are hostile
input: whatever the shape, the answer is a result, never an exception.

Keys (docs/architecture.md): a conversation is `discord:<guild_id>:<thread_id>` in a guild
(the thread it lives in; a thread started from a message has that message's id, so a mention
in a channel names its future thread before it exists) and `discord:dm:<channel_id>` in a DM.
Its channel is `discord:<guild_id>:<channel_id>` (a thread's parent: threads of one channel
share a workspace), `discord:dm:<channel_id>` for a DM.

Size: Discord caps content at 4,000 characters (with Nitro), so longer text is not Discord's:
it is cut to `MAX_TEXT_CHARS` and marked `truncated` (a note tells the model), not dropped.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from bots.discord.mentions import addressed, name_mentions
from bots.incoming import Attachment, BackfillMessage, Incoming
from core.messages import Author

MAX_TEXT_CHARS = 4_000
MAX_ATTACHMENTS = 10  # Discord's own limit per message
MAX_FILE_NAME_CHARS = 255
MAX_URL_CHARS = 2_048
MAX_FILE_BYTES = 1 << 40  # a `size` beyond 1 TiB is nonsense, not a file
MAX_NAME_CHARS = 80
MAX_ROLES = 250  # Discord's cap on roles in a guild
MAX_MENTIONS = 100
MAX_OPTIONS = 25  # Discord's cap on a command's options
MAX_OPTION_CHARS = 6_000  # a string option holds at most 6,000 characters
MAX_PROMPT_CHARS = MAX_OPTION_CHARS
TRUNCATION_NOTE = "\n\n[message truncated to {limit} characters]"
DM = "dm"

# Snowflakes are decimal strings of a 64-bit integer. Anything else, a colon above all, would
# break the structure of our keys.
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
_STOP_WORDS = frozenset({"stop", "cancel"})
_DISCORD_EPOCH_MS = 1_420_070_400_000

# Message types that are a person's message: DEFAULT and REPLY. Everything else (joins, pins,
# thread-created notices, command responses, ...) is a system message.
_PERSON_MESSAGE_TYPES = frozenset({0, 19})
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


class IgnoreReason(enum.StrEnum):
    MALFORMED = "malformed"
    BOT_MESSAGE = "bot_message"
    OWN_MESSAGE = "own_message"
    WEBHOOK = "webhook"
    SYSTEM_MESSAGE = "system_message"
    EDITED = "edited"
    EMPTY = "empty"
    MENTIONS_SOMEONE_ELSE = "mentions_someone_else"
    NOT_ADDRESSED = "not_addressed"
    UNSUPPORTED_INTERACTION = "unsupported_interaction"
    UNKNOWN_COMMAND = "unknown_command"
    UNKNOWN_COMPONENT = "unknown_component"


@dataclass(slots=True, frozen=True)
class Ignored:
    """Why a payload gets no answer. `detail` names a field, never payload text."""

    reason: IgnoreReason
    detail: str = ""


@dataclass(slots=True, frozen=True)
class DiscordFile:
    """A file attached to a message, to download later (bounded by `size`)."""

    id: str
    name: str
    content_type: str
    url: str
    size: int | None

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")


@dataclass(slots=True, frozen=True)
class Person:
    """Who sent a message or pressed a button: user id, the name people see, guild roles."""

    user_id: str
    name: str
    role_ids: tuple[str, ...]

    def author(self) -> Author:
        return Author(id=self.user_id, name=self.name)


def conversation_key(guild_id: str | None, channel_id: str) -> str:
    return f"discord:{guild_id or DM}:{channel_id}"


@dataclass(slots=True, frozen=True)
class DiscordMessage:
    """A message addressed to the assistant: mentioned, replied to, in a DM, or in its thread.

    `thread_id` is where the answer goes: the thread the message is in, the thread to start on
    the message itself (`opens_thread`: a mention in a channel), or the DM channel.
    """

    message_id: str
    guild_id: str | None
    channel_id: str  # where the message was posted
    thread_id: str
    parent_channel_id: str  # the channel whose workspace this conversation uses
    person: Person
    timestamp: float
    text: str  # the bot's own mention removed, other mentions named
    is_dm: bool
    mentioned: bool  # by a mention or by replying to the assistant
    opens_thread: bool
    in_teammate_thread: bool  # continues a thread Teammate is part of
    stop_requested: bool
    truncated: bool
    files: tuple[DiscordFile, ...]

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.guild_id, self.thread_id)

    @property
    def channel_key(self) -> str:
        return conversation_key(self.guild_id, self.parent_channel_id)

    @property
    def delivery_id(self) -> str:
        return f"discord:msg:{self.message_id}"

    def to_incoming(
        self,
        *,
        attachments: tuple[Attachment, ...] = (),
        backfill: tuple[BackfillMessage, ...] = (),
        title: str | None = None,
    ) -> Incoming:
        """The runner's view; downloaded files and backfill come from IO."""
        return Incoming(
            conversation_key=self.conversation_key,
            channel_key=self.channel_key,
            author=self.person.author(),
            text=self.text,
            delivery_id=self.delivery_id,
            timestamp=self.timestamp,
            attachments=attachments,
            platform_message_id=self.message_id,
            backfill=backfill,
            title=title,
        )


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
    """One of our buttons: Stop on a run, or 👍/👎 on an answer."""

    action: Literal["stop", "feedback"]
    run_id: int
    context: InteractionContext
    message_id: str | None  # the message the button is on
    vote: Literal["up", "down"] | None = None  # feedback only
    target_channel_id: str | None = None  # stop: the conversation's channel, when named

    @property
    def conversation_key(self) -> str:
        """The run's conversation: the one the button names, else where it was pressed."""
        channel = self.target_channel_id or self.context.channel_id
        return conversation_key(self.context.guild_id, channel)


ParsedMessage: TypeAlias = DiscordMessage | Ignored
ParsedInteraction: TypeAlias = SlashCommand | ButtonPress | Ignored


# -- custom ids --------------------------------------------------------------------------------

_STOP_ID = re.compile(r"stop:([0-9]{1,18})(?::([0-9]{1,20}))?")
_FEEDBACK_ID = re.compile(r"feedback:([0-9]{1,18}):(up|down)")


def stop_custom_id(run_id: int, channel_id: str | None = None) -> str:
    """The Stop button's persistent id: the run, and the conversation's channel (the thread or
    DM), so a press on an answer outside its thread still stops the right conversation."""
    return f"stop:{run_id}" if channel_id is None else f"stop:{run_id}:{channel_id}"


def feedback_custom_id(run_id: int, vote: Literal["up", "down"]) -> str:
    return f"feedback:{run_id}:{vote}"


def parse_custom_id(
    custom_id: object,
) -> tuple[Literal["stop", "feedback"], int, str | None] | None:
    """(action, run id, stop's channel id or feedback's vote), or None if not one of ours."""
    if not isinstance(custom_id, str) or len(custom_id) > 100:
        return None
    stop = _STOP_ID.fullmatch(custom_id)
    if stop is not None:
        return "stop", int(stop.group(1)), stop.group(2)
    feedback = _FEEDBACK_ID.fullmatch(custom_id)
    if feedback is not None:
        return "feedback", int(feedback.group(1)), feedback.group(2)
    return None


# -- messages ----------------------------------------------------------------------------------


def parse_message(
    payload: object,
    *,
    bot_user_id: str,
    event: str = "MESSAGE_CREATE",
    thread_parent: Callable[[str], str | None] = lambda _channel_id: None,
    known_thread: Callable[[str], bool] = lambda _key: False,
    bot_role_ids: Collection[str] = (),
) -> ParsedMessage:
    """Translate one message payload (the gateway event's `d`).

    `thread_parent(channel_id)` is the parent channel's id when `channel_id` is a thread, else
    None; `known_thread(conversation_key)` says whether Teammate is part of that thread, so
    messages there continue the conversation without a mention. It is asked only when it
    decides: a message in a thread (or a reply in a channel) that does not mention the bot.
    """
    if event != "MESSAGE_CREATE":
        return Ignored(IgnoreReason.EDITED if event == "MESSAGE_UPDATE" else IgnoreReason.MALFORMED)
    if not isinstance(payload, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "payload")
    if payload.get("edited_timestamp") is not None:
        return Ignored(IgnoreReason.EDITED)
    if payload.get("webhook_id") is not None:
        return Ignored(IgnoreReason.WEBHOOK)
    author = payload.get("author")
    if not isinstance(author, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "author")
    user_id = _snowflake(author.get("id"))
    if user_id is None:
        return Ignored(IgnoreReason.MALFORMED, "author")
    if user_id == bot_user_id:
        return Ignored(IgnoreReason.OWN_MESSAGE)
    if author.get("bot") is True or author.get("system") is True:
        # Any bot, so two bots mentioning each other cannot start a loop.
        return Ignored(IgnoreReason.BOT_MESSAGE)
    message_type = payload.get("type", 0)
    if type(message_type) is not int:
        return Ignored(IgnoreReason.MALFORMED, "type")
    if message_type not in _PERSON_MESSAGE_TYPES:
        return Ignored(IgnoreReason.SYSTEM_MESSAGE)
    message_id = _snowflake(payload.get("id"))
    if message_id is None:
        return Ignored(IgnoreReason.MALFORMED, "id")
    channel_id = _snowflake(payload.get("channel_id"))
    if channel_id is None:
        return Ignored(IgnoreReason.MALFORMED, "channel_id")
    raw_guild = payload.get("guild_id")
    guild_id = _snowflake(raw_guild)
    if raw_guild is not None and guild_id is None:
        return Ignored(IgnoreReason.MALFORMED, "guild_id")
    content = payload.get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, str):
        return Ignored(IgnoreReason.MALFORMED, "content")
    files = _files(payload.get("attachments"))
    if files is None:
        return Ignored(IgnoreReason.MALFORMED, "attachments")
    mention_names = _mention_names(payload.get("mentions"))
    if mention_names is None:
        return Ignored(IgnoreReason.MALFORMED, "mentions")

    # Bound first: every later step is then linear in at most MAX_TEXT_CHARS.
    truncated = len(content) > MAX_TEXT_CHARS
    content = content[:MAX_TEXT_CHARS]
    replied_to = _replied_to(payload)
    mentioned, mentions_others = addressed(content, replied_to, bot_user_id, bot_role_ids)
    is_dm = guild_id is None
    person = _person(author, payload.get("member"))

    parent = None if is_dm else thread_parent(channel_id)
    parent_id = _snowflake(parent)
    in_thread = parent_id is not None
    thread_id = channel_id
    opens_thread = False
    in_teammate_thread = False
    if is_dm:
        parent_id = channel_id
    elif in_thread:
        assert parent_id is not None
        if not mentioned:
            if mentions_others:
                return Ignored(IgnoreReason.MENTIONS_SOMEONE_ELSE)
            if not known_thread(conversation_key(guild_id, channel_id)):
                return Ignored(IgnoreReason.NOT_ADDRESSED)
            in_teammate_thread = True
    else:
        parent_id = channel_id
        if replied_to is not None and known_thread(conversation_key(guild_id, replied_to[0])):
            # A reply to an answer whose thread is ours (a thread started from a message has
            # the message's id): it continues that conversation.
            thread_id = replied_to[0]
            in_teammate_thread = True
        elif mentioned:
            thread_id = message_id
            opens_thread = True
        elif mentions_others:
            return Ignored(IgnoreReason.MENTIONS_SOMEONE_ELSE)
        else:
            return Ignored(IgnoreReason.NOT_ADDRESSED)

    text = name_mentions(content, bot_user_id, mention_names, bot_role_ids)
    if not text and not files:
        return Ignored(IgnoreReason.EMPTY)
    stop_requested = (mentioned or is_dm) and not files and _is_stop(text)
    if truncated:
        text += TRUNCATION_NOTE.format(limit=MAX_TEXT_CHARS)
    return DiscordMessage(
        message_id=message_id,
        guild_id=guild_id,
        channel_id=channel_id,
        thread_id=thread_id,
        parent_channel_id=parent_id,
        person=person,
        timestamp=snowflake_time(message_id),
        text=text,
        is_dm=is_dm,
        mentioned=mentioned,
        opens_thread=opens_thread,
        in_teammate_thread=in_teammate_thread,
        stop_requested=stop_requested,
        truncated=truncated,
        files=files,
    )


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
    interaction_id = _snowflake(payload.get("id"))
    application_id = _snowflake(payload.get("application_id"))
    token = payload.get("token")
    if interaction_id is None:
        return Ignored(IgnoreReason.MALFORMED, "id")
    if application_id is None:
        return Ignored(IgnoreReason.MALFORMED, "application_id")
    if not isinstance(token, str) or not 0 < len(token) <= 1_000 or not token.isascii():
        return Ignored(IgnoreReason.MALFORMED, "token")
    raw_guild = payload.get("guild_id")
    guild_id = _snowflake(raw_guild)
    if raw_guild is not None and guild_id is None:
        return Ignored(IgnoreReason.MALFORMED, "guild_id")
    channel = payload.get("channel")
    channel = channel if isinstance(channel, Mapping) else {}
    channel_id = _snowflake(payload.get("channel_id")) or _snowflake(channel.get("id"))
    if channel_id is None:
        return Ignored(IgnoreReason.MALFORMED, "channel_id")
    raw_type = channel.get("type")
    channel_type = raw_type if type(raw_type) is int else None
    in_thread = guild_id is not None and channel_type in _THREAD_CHANNEL_TYPES
    parent_id = _snowflake(channel.get("parent_id")) if in_thread else None
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
    user_id = _snowflake(user.get("id"))
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
        person=_person(user, member),
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
    message_id = _snowflake(message.get("id")) if isinstance(message, Mapping) else None
    if action == "stop":
        return ButtonPress("stop", run_id, context, message_id, target_channel_id=extra)
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


# -- shared helpers ----------------------------------------------------------------------------


def snowflake_time(snowflake: str) -> float:
    """When a snowflake was made, in seconds since the Unix epoch (its top 42 bits)."""
    return ((int(snowflake) >> 22) + _DISCORD_EPOCH_MS) / 1000


def _snowflake(value: object) -> str | None:
    if not isinstance(value, str) or not _SNOWFLAKE.fullmatch(value):
        return None
    return value if int(value) < 2**64 else None


def _clean_name(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    name = " ".join(value[: MAX_NAME_CHARS * 4].split())[:MAX_NAME_CHARS]
    return name or None


def _person(user: Mapping[object, object], member: object) -> Person:
    """Nickname in this guild, else the global display name, else the username."""
    user_id = _snowflake(user.get("id")) or "0"
    nick = _clean_name(member.get("nick")) if isinstance(member, Mapping) else None
    name = nick or _clean_name(user.get("global_name")) or _clean_name(user.get("username"))
    roles: tuple[str, ...] = ()
    if isinstance(member, Mapping):
        raw_roles = member.get("roles")
        if isinstance(raw_roles, list):
            roles = tuple(
                role for role in map(_snowflake, raw_roles[:MAX_ROLES]) if role is not None
            )
    return Person(user_id=user_id, name=name or user_id, role_ids=roles)


def _mention_names(value: object) -> dict[str, str] | None:
    """The users a message mentions, id → display name; None when `mentions` is broken."""
    if value is None:
        return {}
    if not isinstance(value, list):
        return None
    names: dict[str, str] = {}
    for user in value[:MAX_MENTIONS]:
        if not isinstance(user, Mapping):
            continue
        user_id = _snowflake(user.get("id"))
        if user_id is not None:
            names[user_id] = _person(user, user.get("member")).name
    return names


def _replied_to(payload: Mapping[object, object]) -> tuple[str, str | None] | None:
    """(message id, its author's id if known) of the message this one replies to."""
    if payload.get("type") != 19:
        return None
    reference = payload.get("message_reference")
    if not isinstance(reference, Mapping):
        return None
    message_id = _snowflake(reference.get("message_id"))
    if message_id is None:
        return None
    referenced = payload.get("referenced_message")
    author_id = None
    if isinstance(referenced, Mapping):
        author = referenced.get("author")
        if isinstance(author, Mapping):
            author_id = _snowflake(author.get("id"))
    return message_id, author_id


def _files(value: object) -> tuple[DiscordFile, ...] | None:
    """The downloadable attachments; None when `attachments` is not a list. Items with a broken
    shape or a URL that is not http(s) are skipped."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    files: list[DiscordFile] = []
    for item in value[:MAX_ATTACHMENTS]:
        if not isinstance(item, Mapping):
            continue
        file_id = _snowflake(item.get("id"))
        url = item.get("url")
        if file_id is None or not isinstance(url, str) or len(url) > MAX_URL_CHARS:
            continue
        if not url.startswith(("https://", "http://")):
            continue
        name = item.get("filename")
        content_type = item.get("content_type")
        size = item.get("size")
        files.append(
            DiscordFile(
                id=file_id,
                name=name[:MAX_FILE_NAME_CHARS] if isinstance(name, str) and name else file_id,
                content_type=content_type[:255]
                if isinstance(content_type, str) and content_type
                else "application/octet-stream",
                url=url,
                size=size if type(size) is int and 0 <= size <= MAX_FILE_BYTES else None,
            )
        )
    return tuple(files)


def _is_stop(text: str) -> bool:
    return text.strip().rstrip(".!").strip().casefold() in _STOP_WORDS


__all__ = [
    "ButtonPress",
    "DiscordFile",
    "DiscordMessage",
    "IgnoreReason",
    "Ignored",
    "InteractionContext",
    "Person",
    "SlashCommand",
    "conversation_key",
    "feedback_custom_id",
    "parse_custom_id",
    "parse_interaction",
    "parse_message",
    "snowflake_time",
    "stop_custom_id",
]
