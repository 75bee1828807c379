"""The Web API calls of one Slack surface, in one thread.

Owns: `ThreadCalls` (one call with its retry rules; posting, updating and deleting in the
thread; finding a post whose fate is unknown by its metadata; reactions) and the helpers that
read a `SlackApiError`. `bots.platforms.slack.surface` and its parts decide what to send when; this
module decides only how a call is made safely.

The rules: a 429 is retried after its Retry-After (bounded), or handed to the caller that
asked to skip rather than wait (a progress write: the next one shows the latest state); a
write that is not idempotent (posting, streaming) is never repeated after a transport error,
because Slack may have carried it out: it is looked up in the thread by the `metadata` every
message carries (the run and the part) instead. A part of the final answer is posted again
only when it is not in the thread, and tried again with backoff while Slack answers 5xx.

Must not: keep the state of a run beyond the run id its messages are marked with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack import blocks

log = logging.getLogger(__name__)

MAX_RATE_LIMIT_RETRIES = 8
# Slack answering 5xx to the final answer: tried again after 0.5, 1, 2, 4, 8 s (about 15 s).
SERVER_ERROR_RETRIES = 5
SERVER_ERROR_BACKOFF_S = 0.5
MAX_RETRY_AFTER_S = 60.0
METADATA_EVENT = "teammate_answer"
LOOKUP_PAGES = 5  # conversations.replies pages searched for an ambiguous post

TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)

# A progress write that got a 429: the caller skips it (and backs off) rather than waiting.
OnRateLimit = Callable[[SlackApiError], None]


class ThreadCalls:
    """Calls into one thread of one channel. `run_id` marks every message posted (0 when the
    surface has no run), so that a post whose fate is unknown can be found again."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.run_id: int | None = None
        self.sleep = sleep

    async def call(
        self,
        method: Callable[..., Awaitable[Any]],
        *,
        idempotent: bool = False,
        wait_on_429: bool = True,
        **arguments: Any,
    ) -> Any:
        """One Web API call: retried after Retry-After on a 429 (bounded; `wait_on_429`
        False raises it for the caller to skip); after a transport error retried once only
        when repeating it cannot show anything twice."""
        rate_limited = 0
        transport_failures = 0
        while True:
            try:
                return await method(**arguments)
            except SlackApiError as error:
                if wait_on_429 and is_rate_limited(error) and rate_limited < MAX_RATE_LIMIT_RETRIES:
                    rate_limited += 1
                    await self.sleep(retry_after(error))
                    continue
                raise
            except TRANSPORT_ERRORS:
                if idempotent and transport_failures == 0:
                    transport_failures += 1
                    continue
                raise

    def _metadata(self, part: str) -> dict[str, Any]:
        return {
            "event_type": METADATA_EVENT,
            "event_payload": {"run_id": self.run_id or 0, "part": part},
        }

    # -- posting ---------------------------------------------------------------------------------

    async def post(
        self, body: blocks.MessageBody, *, part: str, on_rate_limit: OnRateLimit | None = None
    ) -> str | None:
        """Post a message in the thread; None if Slack refused it. After a transport error
        it is looked for in the thread, never posted again. With `on_rate_limit`, a 429 is
        handed to it instead of waited out."""
        try:
            response = await self.call(
                self.client.chat_postMessage,
                wait_on_429=on_rate_limit is None,
                channel=self.channel,
                thread_ts=self.thread_ts,
                metadata=self._metadata(part),
                unfurl_links=False,
                unfurl_media=False,
                **body.arguments(),
            )
        except SlackApiError as error:
            if on_rate_limit is not None and is_rate_limited(error):
                on_rate_limit(error)
                return None
            log.warning("posting in %s failed (%s)", self.channel, error_code(error))
            return None
        except TRANSPORT_ERRORS:
            # The message may have landed: look for it rather than posting it twice.
            found = await self.find_posted(part)
            if found is None:
                log.warning(
                    "a post in %s failed in transport and is not in the thread", self.channel
                )
            return found
        return str(response["ts"])

    async def post_once(self, body: blocks.MessageBody, *, part: str) -> str | None:
        """Post a part of the final answer: if the post's fate is unknown and the part is not
        in the thread, post it again (the final answer must not be lost). While Slack answers
        5xx the post is tried again with backoff (looking in the thread first: a failed call
        may have posted it), then reported in the log as undeliverable."""
        for attempt in range(SERVER_ERROR_RETRIES + 1):
            try:
                response = await self.call(
                    self.client.chat_postMessage,
                    channel=self.channel,
                    thread_ts=self.thread_ts,
                    metadata=self._metadata(part),
                    unfurl_links=False,
                    unfurl_media=False,
                    **body.arguments(),
                )
                return str(response["ts"])
            except SlackApiError as error:
                if is_server_error(error) and attempt < SERVER_ERROR_RETRIES:
                    await self.sleep(SERVER_ERROR_BACKOFF_S * 2**attempt)
                    found = await self.find_posted(part)
                    if found is not None:
                        return found
                    continue
                if error_code(error) == "invalid_blocks":
                    log.warning("posting the answer failed (invalid_blocks); posting its text")
                    return await self._post_plain(body, part)
                log.warning(
                    "undeliverable: part %s of the answer of run %s in %s (Slack: %s, %d tries)",
                    part,
                    self.run_id,
                    self.channel,
                    error_code(error),
                    attempt + 1,
                )
                return None
            except TRANSPORT_ERRORS:
                found = await self.find_posted(part)
                if found is not None:
                    return found
                break
        try:
            response = await self.call(
                self.client.chat_postMessage,
                channel=self.channel,
                thread_ts=self.thread_ts,
                metadata=self._metadata(part),
                **body.arguments(),
            )
            return str(response["ts"])
        except (SlackApiError, *TRANSPORT_ERRORS):
            log.exception("the final answer could not be posted in %s", self.channel)
            return None

    async def _post_plain(self, body: blocks.MessageBody, part: str) -> str | None:
        """Last resort when Slack refuses the blocks: the text alone."""
        try:
            response = await self.call(
                self.client.chat_postMessage,
                channel=self.channel,
                thread_ts=self.thread_ts,
                metadata=self._metadata(part),
                text=body.text,
            )
            return str(response["ts"])
        except (SlackApiError, *TRANSPORT_ERRORS):
            return None

    async def update(
        self, ts: str, body: blocks.MessageBody, *, on_rate_limit: OnRateLimit | None = None
    ) -> bool:
        """Replace a message (idempotent, so safe to repeat). False if it failed."""
        try:
            await self.call(
                self.client.chat_update,
                idempotent=True,
                wait_on_429=on_rate_limit is None,
                channel=self.channel,
                ts=ts,
                **body.arguments(),
            )
        except SlackApiError as error:
            if on_rate_limit is not None and is_rate_limited(error):
                on_rate_limit(error)
                return False
            log.warning("updating a message in %s failed (%s)", self.channel, error_code(error))
            return False
        except TRANSPORT_ERRORS:
            log.warning("updating a message in %s failed in transport", self.channel)
            return False
        return True

    async def delete(self, ts: str) -> bool:
        """Delete one of our messages; False if it failed (it stays)."""
        try:
            await self.call(self.client.chat_delete, idempotent=True, channel=self.channel, ts=ts)
        except (SlackApiError, *TRANSPORT_ERRORS):
            return False
        return True

    async def stop_stream_quietly(self, ts: str) -> None:
        """End a native stream, expecting that it may fail (it broke, or Slack closed it)."""
        with contextlib.suppress(SlackApiError, *TRANSPORT_ERRORS):
            await self.call(self.client.chat_stopStream, channel=self.channel, ts=ts)

    # -- finding what was posted ---------------------------------------------------------------

    async def posted_parts(self) -> dict[str, str]:
        """The ts of each part of this run's answer already in the thread, by part."""
        found: dict[str, str] = {}

        def ours(message: dict[str, Any]) -> bool:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            part = payload.get("part")
            if (
                metadata.get("event_type") == METADATA_EVENT
                and payload.get("run_id") == (self.run_id or 0)
                and isinstance(part, str)
                and part.startswith("answer:")
            ):
                found[part] = str(message["ts"])  # the newest wins, as in `find_posted`
            return False

        await self.find_message(ours)
        return found

    async def find_posted(self, part: str) -> str | None:
        """The ts of this run's message `part` if it is in the thread."""

        def ours(message: dict[str, Any]) -> bool:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            return (
                metadata.get("event_type") == METADATA_EVENT
                and payload.get("run_id") == (self.run_id or 0)
                and payload.get("part") == part
            )

        return await self.find_message(ours)

    async def find_message(self, matches: Callable[[dict[str, Any]], bool]) -> str | None:
        """The ts of the newest bot message in the thread that `matches` (bounded search)."""
        cursor: str | None = None
        found: str | None = None
        for _ in range(LOOKUP_PAGES):
            try:
                page = await self.call(
                    self.client.conversations_replies,
                    idempotent=True,
                    channel=self.channel,
                    ts=self.thread_ts,
                    cursor=cursor,
                    limit=200,
                    include_all_metadata=True,
                )
            except (SlackApiError, *TRANSPORT_ERRORS):
                return found
            for message in page.get("messages") or []:
                if isinstance(message, dict) and message.get("bot_id") and matches(message):
                    found = str(message["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return found
        return found

    async def react(self, message_ts: str | None, name: str, *, add: bool) -> None:
        method = self.client.reactions_add if add else self.client.reactions_remove
        try:
            await self.call(
                method, idempotent=True, channel=self.channel, timestamp=message_ts, name=name
            )
        except SlackApiError as error:
            if error_code(error) not in ("already_reacted", "no_reaction"):
                log.info("reaction %s failed (%s)", name, error_code(error))
        except TRANSPORT_ERRORS:
            log.info("reaction %s failed in transport", name)


def error_code(error: SlackApiError) -> str:
    try:
        return str(error.response.get("error") or "unknown")
    except Exception:
        return "unknown"


def is_server_error(error: SlackApiError) -> bool:
    try:
        return int(error.response.status_code) >= 500
    except (AttributeError, TypeError, ValueError):
        return False


def is_rate_limited(error: SlackApiError) -> bool:
    try:
        return int(error.response.status_code) == 429
    except (AttributeError, TypeError, ValueError):
        return False


def retry_after(error: SlackApiError) -> float:
    try:
        value = error.response.headers.get("Retry-After") or error.response.headers.get(
            "retry-after"
        )
        seconds = float(value) if value is not None else 1.0
    except (AttributeError, TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
