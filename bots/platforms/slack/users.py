"""People's display names, from `users.info`, cached.

Owns: `UserNames`, a bounded cache of Slack user id → the name people see (display name, else
real name, else the user name, else the id). Every message is attributed by name, so a busy
channel would otherwise call `users.info` once per message; a name is kept for `ttl_s` and at
most `max_entries` are kept (least recently used dropped first). Concurrent lookups of one id
share one call. A failed lookup is never fatal: the id stands in for the name, briefly cached
so a Slack outage is not hammered.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 80
FAILED_TTL_S = 60.0
_MENTION = re.compile(r"<@([A-Za-z0-9]{1,64})(?:\|[^>]{0,200})?>")
# Slack's other markup: channels, @here and groups, links (`<url|label>`).
_MARKUP = re.compile(
    r"<([#!])([^|>\s]{1,200})(?:\|([^>]{0,200}))?>|<((?:https?|mailto):[^|>\s]{1,2000})(?:\|([^>]{0,500}))?>"
)


class UserNames:
    """Display names by user id (`client` is an `AsyncWebClient`)."""

    def __init__(
        self,
        client: Any,
        *,
        ttl_s: float = 3600.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._names: OrderedDict[str, tuple[str, float]] = OrderedDict()  # id → (name, expiry)
        self._inflight: dict[str, asyncio.Future[str]] = {}

    def __len__(self) -> int:
        return len(self._names)

    def remember(self, user_id: str, name: str) -> None:
        """Store a name learnt elsewhere (a payload that carries it)."""
        self._put(user_id, _clean(name) or user_id, self._ttl_s)

    def cached(self, user_id: str) -> str | None:
        """The name if it is known and fresh; never calls Slack."""
        cached = self._names.get(user_id)
        return cached[0] if cached is not None and cached[1] > self._clock() else None

    async def name(self, user_id: str) -> str:
        cached = self._names.get(user_id)
        if cached is not None and cached[1] > self._clock():
            self._names.move_to_end(user_id)
            return cached[0]
        pending = self._inflight.get(user_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(user_id))
            self._inflight[user_id] = pending
            pending.add_done_callback(lambda done: self._forget(user_id, done))
        # Shielded: one caller giving up does not cancel the lookup the others wait for.
        return await asyncio.shield(pending)

    def _forget(self, user_id: str, done: asyncio.Future[str]) -> None:
        if self._inflight.get(user_id) is done:
            del self._inflight[user_id]

    async def _fetch(self, user_id: str) -> str:
        try:
            response = await self._client.users_info(user=user_id)
            user = response.get("user")
        except Exception as exc:  # no name is no reason to drop a message
            log.warning("users.info for %s failed: %s", user_id, type(exc).__name__)
            self._put(user_id, user_id, FAILED_TTL_S)
            return user_id
        name = display_name(user) or user_id
        self._put(user_id, name, self._ttl_s)
        return name

    def _put(self, user_id: str, name: str, ttl_s: float) -> None:
        self._names[user_id] = (name, self._clock() + ttl_s)
        self._names.move_to_end(user_id)
        while len(self._names) > self._max_entries:
            self._names.popitem(last=False)


def display_name(user: object) -> str | None:
    """The name people see for a `users.info` user object, or None if it has none."""
    if not isinstance(user, dict):
        return None
    profile = user.get("profile")
    candidates: list[object] = []
    if isinstance(profile, dict):
        candidates += [profile.get("display_name"), profile.get("real_name")]
    candidates += [user.get("real_name"), user.get("name")]
    for candidate in candidates:
        cleaned = _clean(candidate)
        if cleaned:
            return cleaned
    return None


def _clean(value: object) -> str:
    """One line, bounded: a name goes into headers the model reads."""
    if not isinstance(value, str):
        return ""
    return " ".join(value.split())[:MAX_NAME_CHARS]


async def readable_mentions(text: str, names: UserNames, *, max_lookups: int = 5) -> str:
    """Slack's markup as people see it: `<@U123>` becomes `@Name`, so the model reads who is
    meant; channels, `@here` and links too. At most `max_lookups` names not cached yet are
    looked up (a message can mention hundreds of people); the others are shown by cached
    name, or left as they are."""
    wanted = list(dict.fromkeys(match.group(1) for match in _MENTION.finditer(text)))
    resolved: dict[str, str] = {}
    lookups = 0
    for user_id in wanted:
        known = names.cached(user_id)
        if known is None and lookups < max_lookups:
            lookups += 1
            known = await names.name(user_id)
        if known is not None:
            resolved[user_id] = known

    def name_of(match: re.Match[str]) -> str:
        known = resolved.get(match.group(1))
        return f"@{known}" if known is not None else match.group(0)

    if resolved:
        text = _MENTION.sub(name_of, text)
    return _MARKUP.sub(_readable_markup, text) if "<" in text else text


def _readable_markup(match: re.Match[str]) -> str:
    """`<#C1|general>` → `#general`, `<!here>` → `@here`, `<!subteam^S1|@ops>` → `@ops`,
    `<https://x|docs>` → `docs (https://x)`, `<mailto:a@b.c|a@b.c>` → `a@b.c`."""
    sigil, target, label, url, link_label = match.groups()
    if url is not None:
        if link_label and link_label != url:
            return link_label if url.startswith("mailto:") else f"{link_label} ({url})"
        return url.removeprefix("mailto:")
    if sigil == "#":
        return f"#{label or target}"
    if label:
        return label if label.startswith("@") else f"@{label}"
    return f"@{target.split('^', 1)[0]}"
