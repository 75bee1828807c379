"""Discord gateway payloads, translated: a message or command for Teammate, or a named reason
to ignore it.

Owns: `parse_message` (a `MESSAGE_CREATE` / `MESSAGE_UPDATE` payload's `d`) and its results
(`DiscordMessage`, `Ignored`); and, as the one place the adapter imports translations from,
the names of `bots.platforms.discord.interactions` (`parse_interaction`, `SlashCommand`,
`ButtonPress`, the buttons' custom ids) and `bots.platforms.discord.payload_fields` (`Person`, keys,
snowflakes). Pure: no IO. What needs the client's cache (is this channel a thread, and of which
channel? is this a thread Teammate is part of?) is a callable the adapter passes in. Payloads are
hostile input: whatever the shape, the answer is a result, never an exception.

Keys (docs/architecture.md): a conversation is `discord:<guild_id>:<thread_id>` in a guild
(the thread it lives in; a thread started from a message has that message's id, so a mention
in a channel names its future thread before it exists) and `discord:dm:<channel_id>` in a DM.
Its channel is `discord:<guild_id>:<channel_id>` (a thread's parent: threads of one channel
share a workspace), `discord:dm:<channel_id>` for a DM.

Size: Discord caps content at 4,000 characters (with Nitro), so longer text is not Discord's:
it is cut to `MAX_TEXT_CHARS` and marked `truncated` (a note tells the model), not dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from bots.incoming import Attachment, BackfillMessage, Incoming
from bots.platforms.discord.interactions import (
    MAX_PROMPT_CHARS,
    ButtonPress,
    CommandName,
    InteractionContext,
    OptionValue,
    ParsedInteraction,
    SlashCommand,
    feedback_custom_id,
    parse_custom_id,
    parse_interaction,
    stop_custom_id,
)
from bots.platforms.discord.mentions import addressed, name_mentions
from bots.platforms.discord.payload_fields import (
    DM,
    MAX_NAME_CHARS,
    MAX_ROLES,
    TRUNCATION_NOTE,
    Ignored,
    IgnoreReason,
    Person,
    conversation_key,
    person_of,
    snowflake_id,
    snowflake_time,
)

MAX_TEXT_CHARS = 4_000
MAX_ATTACHMENTS = 10  # Discord's own limit per message
MAX_FILE_NAME_CHARS = 255
MAX_URL_CHARS = 2_048
MAX_FILE_BYTES = 1 << 40  # a `size` beyond 1 TiB is nonsense, not a file
MAX_MENTIONS = 100

_STOP_WORDS = frozenset({"stop", "cancel"})
# Message types that are a person's message: DEFAULT and REPLY. Everything else (joins, pins,
# thread-created notices, command responses, ...) is a system message.
_PERSON_MESSAGE_TYPES = frozenset({0, 19})


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


ParsedMessage: TypeAlias = DiscordMessage | Ignored


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
    fields = _read_fields(payload, bot_user_id)
    if isinstance(fields, Ignored):
        return fields
    # Bound first: every later step is then linear in at most MAX_TEXT_CHARS.
    truncated = len(fields.content) > MAX_TEXT_CHARS
    content = fields.content[:MAX_TEXT_CHARS]
    replied_to = _replied_to(fields.payload)
    mentioned, mentions_others = addressed(content, replied_to, bot_user_id, bot_role_ids)
    is_dm = fields.guild_id is None
    person = person_of(fields.author, fields.payload.get("member"))
    place = _place(fields, mentioned, mentions_others, replied_to, thread_parent, known_thread)
    if isinstance(place, Ignored):
        return place
    text = name_mentions(content, bot_user_id, fields.mention_names, bot_role_ids)
    if not text and not fields.files:
        return Ignored(IgnoreReason.EMPTY)
    stop_requested = (mentioned or is_dm) and not fields.files and _is_stop(text)
    if truncated:
        text += TRUNCATION_NOTE.format(limit=MAX_TEXT_CHARS)
    return DiscordMessage(
        message_id=fields.message_id,
        guild_id=fields.guild_id,
        channel_id=fields.channel_id,
        thread_id=place.thread_id,
        parent_channel_id=place.parent_id,
        person=person,
        timestamp=snowflake_time(fields.message_id),
        text=text,
        is_dm=is_dm,
        mentioned=mentioned,
        opens_thread=place.opens_thread,
        in_teammate_thread=place.in_teammate_thread,
        stop_requested=stop_requested,
        truncated=truncated,
        files=fields.files,
    )


@dataclass(slots=True, frozen=True)
class _Fields:
    """A person's message payload, its fields checked (content not yet bounded)."""

    payload: Mapping[object, object]
    author: Mapping[object, object]
    message_id: str
    channel_id: str
    guild_id: str | None
    content: str
    files: tuple[DiscordFile, ...]
    mention_names: dict[str, str]


def _read_fields(payload: object, bot_user_id: str) -> _Fields | Ignored:
    """The payload's fields, or why it is no person's message (or is broken)."""
    if not isinstance(payload, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "payload")
    if payload.get("edited_timestamp") is not None:
        return Ignored(IgnoreReason.EDITED)
    if payload.get("webhook_id") is not None:
        return Ignored(IgnoreReason.WEBHOOK)
    author = payload.get("author")
    if not isinstance(author, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "author")
    user_id = snowflake_id(author.get("id"))
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
    message_id = snowflake_id(payload.get("id"))
    if message_id is None:
        return Ignored(IgnoreReason.MALFORMED, "id")
    channel_id = snowflake_id(payload.get("channel_id"))
    if channel_id is None:
        return Ignored(IgnoreReason.MALFORMED, "channel_id")
    raw_guild = payload.get("guild_id")
    guild_id = snowflake_id(raw_guild)
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
    return _Fields(payload, author, message_id, channel_id, guild_id, content, files, mention_names)


@dataclass(slots=True, frozen=True)
class _Place:
    """Where a message's answer goes (see `DiscordMessage`)."""

    thread_id: str
    parent_id: str
    opens_thread: bool = False
    in_teammate_thread: bool = False


def _place(
    fields: _Fields,
    mentioned: bool,
    mentions_others: bool,
    replied_to: tuple[str, str | None] | None,
    thread_parent: Callable[[str], str | None],
    known_thread: Callable[[str], bool],
) -> _Place | Ignored:
    """A DM answers in place; a thread only if addressed or Teammate's; in a channel, a reply
    to one of Teammate's threads continues it and a mention opens a thread."""
    guild_id, channel_id = fields.guild_id, fields.channel_id
    if guild_id is None:
        return _Place(channel_id, channel_id)
    parent_id = snowflake_id(thread_parent(channel_id))
    if parent_id is not None:  # in a thread
        if mentioned:
            return _Place(channel_id, parent_id)
        if mentions_others:
            return Ignored(IgnoreReason.MENTIONS_SOMEONE_ELSE)
        if not known_thread(conversation_key(guild_id, channel_id)):
            return Ignored(IgnoreReason.NOT_ADDRESSED)
        return _Place(channel_id, parent_id, in_teammate_thread=True)
    if replied_to is not None and known_thread(conversation_key(guild_id, replied_to[0])):
        # A reply to an answer whose thread is ours (a thread started from a message has
        # the message's id): it continues that conversation.
        return _Place(replied_to[0], channel_id, in_teammate_thread=True)
    if mentioned:
        return _Place(fields.message_id, channel_id, opens_thread=True)
    if mentions_others:
        return Ignored(IgnoreReason.MENTIONS_SOMEONE_ELSE)
    return Ignored(IgnoreReason.NOT_ADDRESSED)


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
        user_id = snowflake_id(user.get("id"))
        if user_id is not None:
            names[user_id] = person_of(user, user.get("member")).name
    return names


def _replied_to(payload: Mapping[object, object]) -> tuple[str, str | None] | None:
    """(message id, its author's id if known) of the message this one replies to."""
    if payload.get("type") != 19:
        return None
    reference = payload.get("message_reference")
    if not isinstance(reference, Mapping):
        return None
    message_id = snowflake_id(reference.get("message_id"))
    if message_id is None:
        return None
    referenced = payload.get("referenced_message")
    author_id = None
    if isinstance(referenced, Mapping):
        author = referenced.get("author")
        if isinstance(author, Mapping):
            author_id = snowflake_id(author.get("id"))
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
        file_id = snowflake_id(item.get("id"))
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
    "DM",
    "MAX_ATTACHMENTS",
    "MAX_NAME_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_ROLES",
    "MAX_TEXT_CHARS",
    "ButtonPress",
    "CommandName",
    "DiscordFile",
    "DiscordMessage",
    "IgnoreReason",
    "Ignored",
    "InteractionContext",
    "OptionValue",
    "ParsedInteraction",
    "ParsedMessage",
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
