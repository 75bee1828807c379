"""A thread's earlier messages, read when Teammate is first mentioned inside it.

Owns: `thread_backfill`, which reads a thread with `conversations.replies` and returns its
messages before the mention as the runner's `BackfillMessage`s, attributed by display name.

Bounded three ways, because a thread can hold thousands of messages: at most `MAX_PAGES`
pages are read (Slack pages oldest first), the newest `MAX_MESSAGES` before the mention are
kept, and they are cut to `MAX_TOTAL_CHARS` (newest kept, each message at most
`MAX_MESSAGE_CHARS`). Teammate's own earlier replies are marked `from_assistant`; other bots'
messages are kept as context under their name. A failure (a missing scope, a rate limit) is
logged and yields no backfill: the message itself is still answered.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from bots.incoming import BackfillMessage
from bots.platforms.slack.users import UserNames, readable_mentions
from core.messages import Author

log = logging.getLogger(__name__)

MAX_PAGES = 5
PAGE_SIZE = 200
MAX_MESSAGES = 50
MAX_MESSAGE_CHARS = 4_000
MAX_TOTAL_CHARS = 30_000
_KEPT_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "bot_message"})


async def thread_backfill(
    client: Any,
    *,
    channel_id: str,
    thread_ts: str,
    before_ts: str,
    bot_user_id: str,
    bot_id: str | None,
    names: UserNames,
) -> tuple[BackfillMessage, ...]:
    """The thread's messages before `before_ts` (the mention), oldest first, bounded."""
    try:
        raw = await _read_thread(client, channel_id, thread_ts, before_ts)
    except Exception as exc:
        log.warning(
            "conversations.replies for %s/%s failed: %s", channel_id, thread_ts, _reason(exc)
        )
        return ()
    kept: list[BackfillMessage] = []
    total = 0
    for message in reversed(raw):  # newest first, so the cut drops the oldest
        item = await _backfill_message(message, bot_user_id, bot_id, names)
        if item is None:
            continue
        total += len(item.text)
        if total > MAX_TOTAL_CHARS:
            break
        kept.append(item)
    kept.reverse()
    return tuple(kept)


async def _read_thread(
    client: Any, channel_id: str, thread_ts: str, before_ts: str
) -> list[Mapping[str, Any]]:
    newest: deque[Mapping[str, Any]] = deque(maxlen=MAX_MESSAGES)
    cursor: str | None = None
    for _page in range(MAX_PAGES):
        response = await client.conversations_replies(
            channel=channel_id,
            ts=thread_ts,
            latest=before_ts,
            inclusive=False,
            limit=PAGE_SIZE,
            **({"cursor": cursor} if cursor else {}),
        )
        messages = response.get("messages")
        if not isinstance(messages, list):
            break
        for message in messages:
            ts = message.get("ts") if isinstance(message, Mapping) else None
            if isinstance(ts, str) and _before(ts, before_ts):
                newest.append(message)
        metadata = response.get("response_metadata")
        cursor = metadata.get("next_cursor") if isinstance(metadata, Mapping) else None
        if not cursor or not response.get("has_more", True):
            break
    return list(newest)


async def _backfill_message(
    message: Mapping[str, Any], bot_user_id: str, bot_id: str | None, names: UserNames
) -> BackfillMessage | None:
    subtype = message.get("subtype")
    if subtype not in _KEPT_SUBTYPES:
        return None
    text = message.get("text")
    text = text if isinstance(text, str) else ""
    text = _with_files(text, message.get("files"))
    if not text.strip():
        return None
    text = _decode(text[:MAX_MESSAGE_CHARS])
    ts = message["ts"]
    user = message.get("user")
    message_bot_id = message.get("bot_id")
    if (bot_id is not None and message_bot_id == bot_id) or user == bot_user_id:
        author = Author(id=bot_user_id, name="Teammate")
        text = await readable_mentions(text, names, max_lookups=0)
        return BackfillMessage(author, text, float(ts), ts, from_assistant=True)
    if message_bot_id or subtype == "bot_message":
        name = _bot_name(message)
        author = Author(id=str(message_bot_id or "bot")[:64], name=name)
    elif isinstance(user, str) and user:
        author = Author(id=user[:64], name=await names.name(user[:64]))
    else:
        return None
    # Names already known only: a long thread must not cost a users.info per mention.
    text = await readable_mentions(text, names, max_lookups=0)
    return BackfillMessage(author, text, float(ts), ts)


def _with_files(text: str, files: object) -> str:
    if not isinstance(files, list):
        return text
    shared = [f.get("name") for f in files[:10] if isinstance(f, Mapping)]
    listed = ", ".join(repr(name[:100]) for name in shared if isinstance(name, str))
    return f"{text}\n(shared files: {listed})" if listed else text


def _bot_name(message: Mapping[str, Any]) -> str:
    profile = message.get("bot_profile")
    for candidate in (
        message.get("username"),
        profile.get("name") if isinstance(profile, Mapping) else None,
    ):
        if isinstance(candidate, str) and candidate.strip():
            return " ".join(candidate.split())[:80] + " (a bot)"
    return "a bot"


def _before(ts: str, before_ts: str) -> bool:
    try:
        return float(ts) < float(before_ts)
    except ValueError:
        return False


def _decode(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _reason(exc: Exception) -> str:
    error = getattr(getattr(exc, "response", None), "get", lambda _k: None)("error")
    return str(error) if error else type(exc).__name__
