"""An answer streamed natively into a Slack thread (chat.startStream / appendStream /
stopStream).

Owns: `NativeStream`, the stream of one run: starting it (a start whose fate is unknown is
never repeated), appending what the answer gained since, finishing it with the rest of the
answer, retiring it when what it showed turned out to be narration (the reply called tools),
and giving up on it (for this surface, or for every surface of the app when the workspace
cannot stream) so that the surface falls back to updating a message. What the stream shows is
`streamed`; the final answer replaces it whenever it cannot be finished with the same text.

Slack ends a stream about five minutes after it started (undocumented; later calls answer
`message_not_in_streaming_state`). The stream is then `expired`: its message stays where it
is and shows the rest of the answer by `chat.update` (about once a second, as the fallback
does), and the final answer replaces it there. Nothing is lost: the refused append is in the
first update.

Must not: decide when to write (the surface's throttled flush does) or post anything else.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from bots.platforms.slack import blocks
from bots.platforms.slack.surface_calls import (
    TRANSPORT_ERRORS,
    OnRateLimit,
    ThreadCalls,
    error_code,
    is_rate_limited,
)
from bots.platforms.slack.surface_options import Outbox, SlackFeatures

log = logging.getLogger(__name__)

STREAM_LIMIT = 11_000  # streamed characters; a longer answer is finished by chat.update
STREAM_ENDED = "message_not_in_streaming_state"  # Slack ended the stream (after ~5 minutes)

# Errors meaning the app or workspace cannot stream natively: every surface stops trying. Any
# other refusal (a channel type, a missing recipient) falls back for this surface only.
NO_STREAMING = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "method_deprecated",
    }
)


class NativeStream:
    """One run's native stream. `native` False: this surface updates a message instead."""

    def __init__(
        self,
        calls: ThreadCalls,
        features: SlackFeatures,
        outbox: Outbox,
        *,
        team_id: str,
        back_off: OnRateLimit,
    ) -> None:
        self._calls = calls
        self._features = features
        self._outbox = outbox
        self._team_id = team_id
        self._back_off = back_off
        self.native = features.streaming
        self.starting = False  # chat.startStream sent, its answer not read yet
        self.broken = False  # an append failed: the final answer replaces what it shows
        self.expired = False  # Slack ended the stream: its message is updated instead
        self.streamed = ""  # what the stream shows
        self._updated = ""  # what the expired stream's message was last updated to show

    @property
    def live(self) -> bool:
        """The answer shows as it is written (the stream started, or is starting)."""
        return self.native and (self._outbox.stream_ts is not None or self.starting)

    @property
    def not_started(self) -> bool:
        """The next write starts the stream."""
        return self._outbox.stream_ts is None and not self.broken

    async def write(self, text: str, *, user_id: str | None) -> None:
        """Bring the stream up to `text` (the answer so far): start it, or append."""
        if self.broken:
            return
        if self._outbox.stream_ts is None:
            await self._start(text[:STREAM_LIMIT], user_id)
            return
        if self.expired:
            await self._update_in_place(self._outbox.stream_ts, text)
            return
        if not text.startswith(self.streamed):
            return  # the model retried a reply: the final answer sets it right
        new = text[len(self.streamed) : STREAM_LIMIT]
        if not new:
            return
        try:
            await self._calls.call(
                self._calls.client.chat_appendStream,
                wait_on_429=False,
                channel=self._calls.channel,
                ts=self._outbox.stream_ts,
                markdown_text=new,
            )
        except SlackApiError as error:
            if is_rate_limited(error):
                self._back_off(error)  # nothing was appended: the next append carries it
                return
            if error_code(error) == STREAM_ENDED:
                log.info("Slack ended the stream; its message is updated from now on")
                self.expired = True
                await self._update_in_place(self._outbox.stream_ts, text)
                return
            log.warning("appending to the stream failed; the final answer will replace it")
            self.broken = True
            return
        except TRANSPORT_ERRORS:
            log.warning("appending to the stream failed; the final answer will replace it")
            self.broken = True
            return
        self.streamed += new

    async def _start(self, chunk: str, user_id: str | None) -> None:
        channel = self._calls.channel
        arguments: dict[str, Any] = {
            "channel": channel,
            "thread_ts": self._calls.thread_ts,
            "markdown_text": chunk,
        }
        if not channel.startswith("D"):  # Slack needs a recipient in channels
            arguments["recipient_user_id"] = user_id
            arguments["recipient_team_id"] = self._team_id
        self.starting = True
        try:
            response = await self._calls.call(
                self._calls.client.chat_startStream, wait_on_429=False, **arguments
            )
        except SlackApiError as error:
            if is_rate_limited(error):
                self._back_off(error)
                return
            if error_code(error) in NO_STREAMING:
                log.info(
                    "native streaming unavailable (%s); updating a message instead",
                    error_code(error),
                )
                self._features.streaming = False
            self.native = False
            return
        except TRANSPORT_ERRORS:
            # It may have started: never start another. If it did, the final answer
            # replaces it (chat.update is safe to repeat); else the message is updated.
            log.warning("starting a stream failed in transport; not retried")
            self.native = False
            self._outbox.stream_ts = await self._calls.find_message(
                lambda m: m.get("text") == chunk
            )
            self.broken = True
            return
        finally:
            self.starting = False
        self._outbox.stream_ts = str(response["ts"])
        self.streamed = chunk

    async def _update_in_place(self, ts: str, text: str) -> None:
        """The expired stream's message shows the answer so far (its end, if long)."""
        if text == self._updated:
            return
        body = blocks.answer_message(blocks.progress_tail(text), extras=[])
        if await self._calls.update(ts, body, on_rate_limit=self._back_off):
            self._updated = text

    async def retire(self) -> None:
        """What the stream showed was narration: end it (its message is the caller's now)
        and start afresh, so the answer streams in a new message."""
        ts = self._outbox.stream_ts
        if ts is not None and not self.expired:
            await self._calls.stop_stream_quietly(ts)
        self._outbox.stream_ts = None
        self.broken = self.expired = False
        self.streamed = self._updated = ""

    async def finish(self, stream_ts: str, body: str, extras: list[dict[str, Any]]) -> bool:
        """Finish the stream with the rest of the answer; False if the answer must be shown
        another way (too long to stream, the stream broke or expired, or it shows other
        text)."""
        if self.expired:
            return False  # (not streaming any more: nothing to stop)
        if self.broken or len(body) > STREAM_LIMIT or not body.startswith(self.streamed):
            await self._calls.stop_stream_quietly(stream_ts)
            return False
        rest = body[len(self.streamed) :]
        arguments: dict[str, Any] = {"channel": self._calls.channel, "ts": stream_ts}
        if rest:
            arguments["markdown_text"] = rest
        if extras:
            arguments["blocks"] = extras
        try:
            await self._calls.call(self._calls.client.chat_stopStream, idempotent=True, **arguments)
        except (SlackApiError, *TRANSPORT_ERRORS):
            log.warning("stopping the stream failed; replacing it with the final answer")
            return False
        self.streamed = body
        return True
