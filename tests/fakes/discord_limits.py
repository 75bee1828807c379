"""Discord's documented limits on messages, as the fake Discord enforces them.

Owns: `ChannelRateLimits`, the per-channel rate limit on message writes (../shared/PLATFORMS.md:
about 5 per 5 s per channel, shared by sends and edits), kept as Discord keeps a bucket: a
window opened by the first write and reset when it ends. Discord's headers describe each
route's own bucket (sends, edits), so a client pacing itself by them alone (discord.py does)
still goes past the shared limit when it mixes sends and edits: then a 429 with `retry_after`,
a `Via` header and the headers, as Discord answers it. And `message_problems`, what Discord
refuses in a message body with a 400 (content over 2,000 characters; more than 10 embeds, a
description over 4,096 characters, over 6,000 over all embeds; more than 10 attachments), and
`too_large`, a file over 10 MiB (a 413).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CONTENT_LIMIT = 2_000
EMBEDS_PER_MESSAGE = 10
EMBED_DESCRIPTION_LIMIT = 4_096
EMBEDS_TOTAL_LIMIT = 6_000
ATTACHMENTS_PER_MESSAGE = 10
UPLOAD_LIMIT_BYTES = 10 * 1024 * 1024
WRITES_PER_WINDOW = 5
WINDOW_S = 5.0


@dataclass(slots=True)
class _Window:
    resets_at: float
    used: int = 0


@dataclass(slots=True, frozen=True)
class Verdict:
    """Whether a write may go through, with the headers Discord sends either way."""

    allowed: bool
    headers: dict[str, str]
    retry_after: float = 0.0


class ChannelRateLimits:
    """`limit` message writes per `window_s` per channel, sends and edits together."""

    def __init__(
        self,
        limit: int = WRITES_PER_WINDOW,
        window_s: float = WINDOW_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._shared: dict[str, _Window] = {}  # by channel: what is enforced
        self._routes: dict[tuple[str, str], _Window] = {}  # by (route, channel): the headers

    def take(self, channel_id: str, route: str) -> Verdict:
        """A write by `route` ("send", "edit") in the channel: allowed, or a 429's verdict."""
        now = self._clock()
        shared = self._window(self._shared, channel_id, now)
        own = self._window(self._routes, (route, channel_id), now)
        if shared.used >= self.limit:
            reset_after = max(shared.resets_at - now, 0.0)
            headers = self._headers(route, 0, reset_after)
            headers["Retry-After"] = str(max(1, round(reset_after)))
            headers["X-RateLimit-Scope"] = "user"
            headers["Via"] = "1.1 google"  # without it discord.py takes a 429 for a ban
            return Verdict(False, headers, reset_after)
        shared.used += 1
        own.used += 1
        return Verdict(
            True, self._headers(route, self.limit - own.used, max(own.resets_at - now, 0.0))
        )

    def _window(self, windows: dict[Any, _Window], key: Any, now: float) -> _Window:
        window = windows.get(key)
        if window is None or now >= window.resets_at:
            window = windows[key] = _Window(resets_at=now + self.window_s)
        return window

    def _headers(self, route: str, remaining: int, reset_after: float) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(remaining, 0)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": f"fake-messages-{route}",
        }


def rate_limited_body(retry_after: float) -> dict[str, Any]:
    return {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}


def message_problems(body: Any, file_sizes: list[int]) -> dict[str, Any] | None:
    """Discord's 400 body for a message it refuses, or None when it takes it."""
    body = body if isinstance(body, dict) else {}
    errors: dict[str, Any] = {}
    content = body.get("content")
    if isinstance(content, str) and len(content) > CONTENT_LIMIT:
        errors["content"] = _error(
            "BASE_TYPE_MAX_LENGTH", f"Must be {CONTENT_LIMIT} or fewer in length."
        )
    embeds = body.get("embeds") or []
    if len(embeds) > EMBEDS_PER_MESSAGE:
        errors["embeds"] = _error(
            "BASE_TYPE_MAX_LENGTH", f"Must be {EMBEDS_PER_MESSAGE} or fewer in length."
        )
    for index, embed in enumerate(embeds):
        description = (embed or {}).get("description") or ""
        if len(description) > EMBED_DESCRIPTION_LIMIT:
            errors[f"embeds.{index}.description"] = _error(
                "BASE_TYPE_MAX_LENGTH", f"Must be {EMBED_DESCRIPTION_LIMIT} or fewer in length."
            )
    if sum(_embed_size(embed or {}) for embed in embeds) > EMBEDS_TOTAL_LIMIT:
        errors["embeds"] = _error("MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size")
    if len(file_sizes) > ATTACHMENTS_PER_MESSAGE:
        errors["attachments"] = _error(
            "BASE_TYPE_MAX_LENGTH", f"Must be {ATTACHMENTS_PER_MESSAGE} or fewer in length."
        )
    if errors:
        return {"message": "Invalid Form Body", "code": 50035, "errors": errors}
    return None


def too_large(file_sizes: list[int]) -> bool:
    """A file over the upload limit: Discord answers 413 (code 40005)."""
    return any(size > UPLOAD_LIMIT_BYTES for size in file_sizes)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"_errors": [{"code": code, "message": message}]}


def _embed_size(embed: dict[str, Any]) -> int:
    """The characters Discord counts towards the 6,000 over all embeds."""
    size = len(embed.get("title") or "") + len(embed.get("description") or "")
    size += len((embed.get("footer") or {}).get("text") or "")
    size += len((embed.get("author") or {}).get("name") or "")
    for fld in embed.get("fields") or []:
        size += len(fld.get("name") or "") + len(fld.get("value") or "")
    return size
