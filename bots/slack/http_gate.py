"""HTTP mode's front door: what reaches bolt is capped, signed by Slack, and parsed off the loop
when large.

Owns: the body cap (`MAX_BODY_BYTES`), the signature check on the raw bytes before anything is
parsed (slack_sdk's `SignatureVerifier`: HMAC-SHA256 of `v0:{timestamp}:{body}`, timestamps
older than 5 minutes refused), parsing a large signed body in a worker thread, and refusals
logged as counted one-liners.

Why: bolt parses the whole body (form fields, or the `payload=` JSON) on the event loop before
it checks the signature, and the endpoint is open to anyone who can reach it. One unsigned
4 MiB form body held the loop for every conversation for 0.7–2 s; `payload=` with megabytes of
`[` raised a RecursionError and logged a traceback per request. Here an unsigned request costs
one HMAC over at most `MAX_BODY_BYTES`, and nothing of it is parsed.

Must not: log a body, a signature or the secret; answer a refused request with anything but its
status and a short reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

# Slack's own payloads stay far below this (a message's text is cut at 40,000 characters, 50
# blocks at most; a `message_changed` event carries two messages); anything larger is not Slack.
MAX_BODY_BYTES = 1024 * 1024
# Parsing a body this large or larger goes to a worker thread (the loop stays free).
PARSE_OFF_LOOP_BYTES = 64 * 1024
REFUSAL_LOG_EVERY_S = 60.0

Dispatch = Callable[[Any], Awaitable[Any]]  # bolt's `async_dispatch(AsyncBoltRequest)`


class RefusalLog:
    """Refused requests, logged as one line when the first comes, then one line a period with
    the counts by reason (a flood of forged requests must not flood the log)."""

    def __init__(self, *, every_s: float = REFUSAL_LOG_EVERY_S, clock: Callable[[], float]) -> None:
        self.every_s = every_s
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._since: float | None = None
        self.total: Counter[str] = Counter()

    def refused(self, reason: str, peer: str | None) -> None:
        self.total[reason] += 1
        now = self._clock()
        if self._since is None:
            self._since = now
            log.warning("Slack HTTP: refused a request from %s (%s)", peer or "?", reason)
            return
        self._counts[reason] += 1
        if now - self._since >= self.every_s:
            counts = ", ".join(f"{why}: {n}" for why, n in sorted(self._counts.items()))
            log.warning(
                "Slack HTTP: refused %d more requests in %.0f s (%s)",
                sum(self._counts.values()),
                now - self._since,
                counts,
            )
            self._counts.clear()
            self._since = now


class HttpGate:
    """The `/slack/events` handler: cap, verify, parse (off the loop when large), dispatch."""

    def __init__(
        self,
        signing_secret: str,
        dispatch: Dispatch,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from slack_sdk.signature import SignatureVerifier

        self._verifier = SignatureVerifier(signing_secret)
        self._dispatch = dispatch
        self.refusals = RefusalLog(clock=clock)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        size = request.content_length
        if size is not None and size > MAX_BODY_BYTES:
            return self._refuse(request, 413, "too large")
        try:
            body = await request.read()  # the app's client_max_size caps a body sent chunked
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(request, 413, "too large")
        if not self._signed(body, request.headers):
            return self._refuse(request, 401, "bad signature")
        try:
            if len(body) >= PARSE_OFF_LOOP_BYTES:
                bolt_request = await asyncio.to_thread(_bolt_request, body, request)
            else:
                bolt_request = _bolt_request(body, request)
        except (ValueError, RecursionError):  # signed, yet not a body bolt can read
            return self._refuse(request, 400, "unparsable")
        from slack_bolt.adapter.aiohttp import to_aiohttp_response

        return await to_aiohttp_response(await self._dispatch(bolt_request))

    def _signed(self, body: bytes, headers: Any) -> bool:
        timestamp = headers.get("X-Slack-Request-Timestamp")
        signature = headers.get("X-Slack-Signature")
        if not timestamp or not signature or not timestamp.isdigit():
            return False
        try:
            return bool(self._verifier.is_valid(body, timestamp, signature))
        except (ValueError, UnicodeDecodeError):  # not UTF-8: Slack signs text
            return False

    def _refuse(self, request: web.Request, status: int, reason: str) -> web.Response:
        self.refusals.refused(reason, request.remote)
        return web.Response(status=status, text=reason)


def _bolt_request(body: bytes, request: web.Request) -> Any:
    """bolt's request (it parses the body as it is built: form fields or `payload=` JSON)."""
    from slack_bolt.request.async_request import AsyncBoltRequest

    return AsyncBoltRequest(
        body=body.decode("utf-8"),
        query=request.query_string,
        headers=request.headers,  # type: ignore[arg-type]
    )
