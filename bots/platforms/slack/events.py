"""Slack Events API payloads, translated: a message for Teammate, or a named reason to ignore it.

Owns: `parse_event` and its results (`SlackMessage`, `AssistantThreadEvent`, `Ignored`).
Pure: no IO. What needs IO (is this a thread the assistant is part of?) is a callable the
adapter passes in. Payloads are hostile input: whatever the shape, the answer is a result,
never an exception.

Keys (see docs/architecture.md): a conversation is `slack:<team>:<channel>:<thread_ts or ts>`,
its channel `slack:<team>:<channel>` (a DM is its own channel). The team is the envelope's
`team_id` (the installation's workspace, stable for Slack Connect channels), else the event's.

De-duplication needs two keys: the `event_id` (Slack's retries) and channel+ts (a mention in
a thread arrives both as `app_mention` and as `message`, with different event ids).

Size: Slack truncates a message's text at 40,000 characters, so longer text is not Slack's:
it is cut to `MAX_TEXT_CHARS` and marked `truncated` (a note is appended so the model knows),
rather than dropped, so a person still gets an answer.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from bots.incoming import Attachment, BackfillMessage, Incoming
from core.messages import Author

MAX_TEXT_CHARS = 40_000
MAX_FILES = 20  # Slack allows 10 per message; more is not Slack's
MAX_FILE_NAME_CHARS = 255
MAX_FILE_BYTES = 1 << 40  # a `size` beyond 1 TiB is nonsense, not a file
TRUNCATION_NOTE = "\n\n[message truncated to {limit} characters]"

# Slack ids (team, channel, user, bot, event, file) are short alphanumerics. Anything else,
# a colon above all, would break the structure of our keys.
_ID = re.compile(r"[A-Za-z0-9]{1,64}")
_TS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
_USER_MENTION = re.compile(r"<@([A-Za-z0-9]{1,64})(?:\|[^>]{0,200})?>")
_EVENT_TYPE = re.compile(r"[a-z_.]{1,64}")
_STOP_WORDS = frozenset({"stop", "cancel"})

# Subtypes that are a person's message; every other subtype (edits, deletes, joins, topic
# changes, bot messages...) is not addressed to the assistant.
_PERSON_SUBTYPES = frozenset({"file_share", "thread_broadcast"})


class IgnoreReason(enum.StrEnum):
    MALFORMED = "malformed"
    UNSUPPORTED_EVENT = "unsupported_event"
    BOT_MESSAGE = "bot_message"
    OWN_MESSAGE = "own_message"
    EDITED = "edited"
    DELETED = "deleted"
    OTHER_SUBTYPE = "other_subtype"
    EMPTY = "empty"
    MENTIONS_SOMEONE_ELSE = "mentions_someone_else"
    NOT_ADDRESSED = "not_addressed"


@dataclass(slots=True, frozen=True)
class Ignored:
    """Why an event gets no answer. `detail` names a field or subtype, never payload text."""

    reason: IgnoreReason
    detail: str = ""


@dataclass(slots=True, frozen=True)
class SlackFile:
    """A file shared with a message, to download later with the bot token."""

    id: str
    name: str
    mimetype: str
    url_private_download: str
    size: int | None


class _ThreadKeys:
    """The keys every event about a thread derives from its team, channel, thread and event."""

    __slots__ = ()
    team_id: str
    channel_id: str
    thread_ts: str
    event_id: str

    @property
    def conversation_key(self) -> str:
        return f"slack:{self.team_id}:{self.channel_id}:{self.thread_ts}"

    @property
    def channel_key(self) -> str:
        return f"slack:{self.team_id}:{self.channel_id}"

    @property
    def event_delivery_id(self) -> str:
        return f"slack:event:{self.event_id}"


@dataclass(slots=True, frozen=True)
class SlackMessage(_ThreadKeys):
    """A message addressed to the assistant (mentioned, in a DM, or in its thread).

    `delivery_id` (channel+ts) is what `to_incoming` hands the runner, which claims it
    atomically on submit; `event_delivery_id` is Slack's `event_id`, for the adapter to claim
    at once on receipt. Both are in `delivery_ids`.
    """

    kind: Literal["app_mention", "message"]
    team_id: str
    channel_id: str
    user_id: str
    ts: str
    thread_ts: str  # the thread this message belongs to: its `thread_ts`, or its own `ts`
    timestamp: float
    text: str  # the bot's own mention removed, Slack's &amp; &lt; &gt; decoded
    event_id: str
    is_dm: bool
    mentioned: bool
    stop_requested: bool
    truncated: bool
    files: tuple[SlackFile, ...]
    # The author's own workspace when it is another organisation's (a Slack Connect channel
    # or DM): `user_team` where the envelope says the channel is shared externally.
    external_team: str | None = None
    # Files shared with it that cannot be opened, when it has nothing else: told, not ignored.
    unreadable_files: int = 0

    @property
    def delivery_id(self) -> str:
        return f"slack:msg:{self.team_id}:{self.channel_id}:{self.ts}"

    @property
    def delivery_ids(self) -> tuple[str, str]:
        return (self.event_delivery_id, self.delivery_id)

    @property
    def in_thread(self) -> bool:
        """True for a reply inside an existing thread (not the thread's first message)."""
        return self.thread_ts != self.ts

    def to_incoming(
        self,
        author_name: str,
        *,
        attachments: tuple[Attachment, ...] = (),
        backfill: tuple[BackfillMessage, ...] = (),
        title: str | None = None,
    ) -> Incoming:
        """The runner's view; the author's display name and downloaded files come from IO."""
        return Incoming(
            conversation_key=self.conversation_key,
            channel_key=self.channel_key,
            author=Author(id=self.user_id, name=author_name),
            text=self.text,
            delivery_id=self.delivery_id,
            timestamp=self.timestamp,
            attachments=attachments,
            platform_message_id=self.ts,
            backfill=backfill,
            title=title,
        )


@dataclass(slots=True, frozen=True)
class AssistantThreadEvent(_ThreadKeys):
    """An AI-app assistant thread was opened (`started`) or its user looked elsewhere."""

    kind: Literal["started", "context_changed"]
    team_id: str
    channel_id: str
    thread_ts: str
    user_id: str
    context_channel_id: str | None  # the channel the user is viewing, when Slack says
    event_id: str


ParsedEvent = SlackMessage | AssistantThreadEvent | Ignored


def parse_event(
    body: object,
    *,
    bot_user_id: str,
    bot_id: str | None = None,
    known_thread: Callable[[str], bool] = lambda _key: False,
) -> ParsedEvent:
    """Translate one Events API envelope (`{"event": {...}, "event_id": ..., "team_id": ...}`).

    `bot_user_id` is the assistant's own user id (`auth.test`'s `user_id`), `bot_id` its bot
    id; `known_thread(conversation_key)` says whether the assistant is part of that thread
    (and replies there should continue without a mention); it is called only for a reply in
    a thread that neither mentions anyone nor is a DM.
    """
    if not isinstance(body, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "body")
    event = body.get("event")
    if not isinstance(event, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "event")
    event_id = _id(body.get("event_id"))
    if event_id is None:
        return Ignored(IgnoreReason.MALFORMED, "event_id")
    team_id = _id(body.get("team_id")) or _id(event.get("team"))
    if team_id is None:
        return Ignored(IgnoreReason.MALFORMED, "team_id")
    kind = event.get("type")
    if kind == "app_mention" or kind == "message":
        early = _not_a_person_asking(event)
        if early is not None:
            return early
        parsed = _message(event, kind, team_id, event_id, bot_user_id, bot_id, known_thread)
        external = _external_team(body, event, team_id)
        if isinstance(parsed, SlackMessage) and external is not None:
            return replace(parsed, external_team=external)
        return parsed
    if kind == "assistant_thread_started" or kind == "assistant_thread_context_changed":
        return _assistant_thread(event, kind, team_id, event_id)
    if isinstance(kind, str) and _EVENT_TYPE.fullmatch(kind):
        return Ignored(IgnoreReason.UNSUPPORTED_EVENT, kind)
    return Ignored(IgnoreReason.UNSUPPORTED_EVENT, "type")


SLACKBOT = "USLACKBOT"


def _not_a_person_asking(event: Mapping[object, object]) -> Ignored | None:
    """Messages that look like a person's but are not a question for Teammate:
    - Slackbot's notices ("You have been removed from #…") come as `USLACKBOT` without a
      `bot_id`: answering each one would cost a model run and a reply to Slackbot;
    - an edited mention comes again as `app_mention` with `edited`: the original was answered
      (or refused) when it was posted, so an edit starts nothing new; on purpose, since
      answering edits would answer a message twice (and post a refusal twice)."""
    if event.get("user") == SLACKBOT:
        return Ignored(IgnoreReason.BOT_MESSAGE, "slackbot")
    if event.get("edited") is not None:
        return Ignored(IgnoreReason.EDITED, "edited")
    return None


def _external_team(
    body: Mapping[object, object], event: Mapping[object, object], team_id: str
) -> str | None:
    """The author's workspace if it is another organisation's: Slack marks a Slack Connect
    channel's events `is_ext_shared_channel`, and the author's workspace is `user_team`. (In
    an Enterprise Grid, a sibling workspace's people share the organisation: not external.)"""
    if body.get("is_ext_shared_channel") is not True:
        return None
    user_team = _id(event.get("user_team")) or _id(event.get("source_team"))
    return user_team if user_team is not None and user_team != team_id else None


def _message(
    event: Mapping[object, object],
    kind: Literal["app_mention", "message"],
    team_id: str,
    event_id: str,
    bot_user_id: str,
    bot_id: str | None,
    known_thread: Callable[[str], bool],
) -> ParsedEvent:
    ignored = _ignored_subtype(event) or _ignored_bot(event, bot_id)
    if ignored is not None:
        return ignored
    fields = _message_fields(event, bot_user_id)
    if isinstance(fields, Ignored):
        return fields

    # Bound first: every later step is then linear in at most MAX_TEXT_CHARS.
    truncated = len(fields.raw_text) > MAX_TEXT_CHARS
    raw_text = fields.raw_text[:MAX_TEXT_CHARS]
    mentioned_ids = {match.group(1) for match in _USER_MENTION.finditer(raw_text)}
    mentioned = kind == "app_mention" or bot_user_id in mentioned_ids
    mentions_others = bool(mentioned_ids - {bot_user_id})
    is_dm = _is_dm(event, fields.channel_id)

    message = SlackMessage(
        kind=kind,
        team_id=team_id,
        channel_id=fields.channel_id,
        user_id=fields.user_id,
        ts=fields.ts,
        thread_ts=fields.thread_ts,
        timestamp=float(fields.ts),
        text="",
        event_id=event_id,
        is_dm=is_dm,
        mentioned=mentioned,
        stop_requested=False,
        truncated=truncated,
        files=fields.files,
    )
    if not (mentioned or is_dm):
        if mentions_others:
            return Ignored(IgnoreReason.MENTIONS_SOMEONE_ELSE)
        if not message.in_thread or not known_thread(message.conversation_key):
            return Ignored(IgnoreReason.NOT_ADDRESSED)
    text = _decode(_strip_mention(raw_text, bot_user_id))
    stop_requested = (mentioned or is_dm) and not fields.files and _is_stop(text)
    if truncated:
        text += TRUNCATION_NOTE.format(limit=MAX_TEXT_CHARS)
    message = replace(message, text=text, stop_requested=stop_requested)
    return _with_text(message, event.get("files"))


def _ignored_subtype(event: Mapping[object, object]) -> Ignored | None:
    """Why a subtype is no person's message (edits, deletes, joins, bots...); None if it is."""
    subtype = event.get("subtype")
    if subtype is None:
        return None
    if not isinstance(subtype, str):
        return Ignored(IgnoreReason.MALFORMED, "subtype")
    if subtype == "bot_message":
        return Ignored(IgnoreReason.BOT_MESSAGE, subtype)
    if subtype == "message_changed":
        return Ignored(IgnoreReason.EDITED, subtype)
    if subtype == "message_deleted":
        return Ignored(IgnoreReason.DELETED, subtype)
    if subtype not in _PERSON_SUBTYPES:
        return Ignored(IgnoreReason.OTHER_SUBTYPE, subtype[:64])
    return None


def _ignored_bot(event: Mapping[object, object], bot_id: str | None) -> Ignored | None:
    """A bot's message (its own included) can carry a user id too: `bot_id` decides first,
    so two bots mentioning each other cannot start a loop."""
    event_bot_id = event.get("bot_id")
    if event_bot_id is not None and event_bot_id != "":
        if bot_id is not None and event_bot_id == bot_id:
            return Ignored(IgnoreReason.OWN_MESSAGE, "bot_id")
        return Ignored(IgnoreReason.BOT_MESSAGE, "bot_id")
    if event.get("bot_profile") is not None:
        return Ignored(IgnoreReason.BOT_MESSAGE, "bot_profile")
    return None


@dataclass(slots=True, frozen=True)
class _MessageFields:
    """A person's message's fields, each checked for shape; the text not yet bounded."""

    user_id: str
    channel_id: str
    ts: str
    thread_ts: str
    raw_text: str
    files: tuple[SlackFile, ...]


def _message_fields(event: Mapping[object, object], bot_user_id: str) -> _MessageFields | Ignored:
    """The fields, or the first one that is malformed (or the bot's own user id)."""
    user_id = _id(event.get("user"))
    if user_id is None:
        return Ignored(IgnoreReason.MALFORMED, "user")
    if user_id == bot_user_id:
        return Ignored(IgnoreReason.OWN_MESSAGE, "user")
    channel_id = _id(event.get("channel"))
    if channel_id is None:
        return Ignored(IgnoreReason.MALFORMED, "channel")
    ts = _ts(event.get("ts"))
    if ts is None:
        return Ignored(IgnoreReason.MALFORMED, "ts")
    raw_thread_ts = event.get("thread_ts")
    thread_ts = ts if raw_thread_ts is None else _ts(raw_thread_ts)
    if thread_ts is None:
        return Ignored(IgnoreReason.MALFORMED, "thread_ts")
    raw_text = event.get("text", "")
    if raw_text is None:
        raw_text = ""
    if not isinstance(raw_text, str):
        return Ignored(IgnoreReason.MALFORMED, "text")
    files = _files(event.get("files"))
    if files is None:
        return Ignored(IgnoreReason.MALFORMED, "files")
    return _MessageFields(user_id, channel_id, ts, thread_ts, raw_text, files)


def _is_dm(event: Mapping[object, object], channel_id: str) -> bool:
    # Events without `channel_type` (older payloads): a DM's channel id starts with D.
    channel_type = event.get("channel_type")
    return channel_type == "im" or (channel_type is None and channel_id.startswith("D"))


def _with_text(message: SlackMessage, raw_files: object) -> ParsedEvent:
    """Nothing to read is ignored, unless files came that cannot be opened (a Slack Connect
    file is `check_file_info`, without a download URL): the sender is then told, not met
    with silence."""
    if message.text or message.files:
        return message
    unreadable = len(raw_files) if isinstance(raw_files, list) else 0
    if not unreadable:
        return Ignored(IgnoreReason.EMPTY)
    return replace(message, unreadable_files=unreadable)


def _assistant_thread(
    event: Mapping[object, object],
    kind: Literal["assistant_thread_started", "assistant_thread_context_changed"],
    team_id: str,
    event_id: str,
) -> ParsedEvent:
    thread = event.get("assistant_thread")
    if not isinstance(thread, Mapping):
        return Ignored(IgnoreReason.MALFORMED, "assistant_thread")
    channel_id = _id(thread.get("channel_id"))
    thread_ts = _ts(thread.get("thread_ts"))
    user_id = _id(thread.get("user_id"))
    if channel_id is None or thread_ts is None or user_id is None:
        return Ignored(IgnoreReason.MALFORMED, "assistant_thread")
    context = thread.get("context")
    context_channel_id = _id(context.get("channel_id")) if isinstance(context, Mapping) else None
    return AssistantThreadEvent(
        kind="started" if kind == "assistant_thread_started" else "context_changed",
        team_id=team_id,
        channel_id=channel_id,
        thread_ts=thread_ts,
        user_id=user_id,
        context_channel_id=context_channel_id,
        event_id=event_id,
    )


def _id(value: object) -> str | None:
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def _ts(value: object) -> str | None:
    if not isinstance(value, str) or not _TS.fullmatch(value):
        return None
    return value if math.isfinite(float(value)) else None


def _files(value: object) -> tuple[SlackFile, ...] | None:
    """The downloadable files; None when `files` is not a list. Files without a download URL
    (Slack Connect's `check_file_info`, tombstones) or with a broken shape are skipped."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    files: list[SlackFile] = []
    for item in value[:MAX_FILES]:
        if not isinstance(item, Mapping):
            continue
        file_id = _id(item.get("id"))
        url = item.get("url_private_download")
        if file_id is None or not isinstance(url, str) or not url.startswith("https://"):
            continue
        if len(url) > 2048:
            continue
        name = item.get("name")
        mimetype = item.get("mimetype")
        size = item.get("size")
        files.append(
            SlackFile(
                id=file_id,
                name=name[:MAX_FILE_NAME_CHARS] if isinstance(name, str) and name else file_id,
                mimetype=mimetype[:255]
                if isinstance(mimetype, str) and mimetype
                else "application/octet-stream",
                url_private_download=url,
                size=size if type(size) is int and 0 <= size <= MAX_FILE_BYTES else None,
            )
        )
    return tuple(files)


def _strip_mention(text: str, bot_user_id: str) -> str:
    """Remove the bot's own mention tokens; keep everyone else's for the adapter to name."""

    def keep_others(match: re.Match[str]) -> str:
        return "" if match.group(1) == bot_user_id else match.group(0)

    stripped = _USER_MENTION.sub(keep_others, text)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()


def _decode(text: str) -> str:
    # Slack escapes exactly these three in message text; `&amp;` last, so "&amp;lt;" stays "&lt;".
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _is_stop(text: str) -> bool:
    return text.strip().rstrip(".!").strip().casefold() in _STOP_WORDS
