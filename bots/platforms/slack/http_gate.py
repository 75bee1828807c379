"""HTTP mode's front door: what reaches bolt is capped, signed by Slack, and parsed off the loop
when large.

Owns: the body cap (`MAX_BODY_BYTES`), the signature check on the raw bytes before anything is
parsed (slack_sdk's `SignatureVerifier`: HMAC-SHA256 of `v0:{timestamp}:{body}`, timestamps
older than 5 minutes refused), parsing a large signed body in a worker thread, refusals
logged as counted one-liners, and acknowledgements first (`AckFirst`: an event's work after
its ack waits until no request has been handled for `QUIET_S`, `WORK_MAX_DEFER_S` at most,
and starts
`RELEASE_PER_TURN` a turn).

Why: bolt parses the whole body (form fields, or the `payload=` JSON) on the event loop before
it checks the signature, and the endpoint is open to anyone who can reach it. One unsigned
4 MiB form body held the loop for every conversation for 0.7–2 s; `payload=` with megabytes of
`[` raised a RecursionError and logged a traceback per request. Here an unsigned request costs
one HMAC over at most `MAX_BODY_BYTES`, and nothing of it is parsed. Acknowledgements first:
the work after an ack (names, the store, the answer: a few ms of the loop each) competed
with the acks still to send, so in a burst of 500 events the last acks waited for the work of
the first (ack p99 1.8–2.4x a bare bolt app's; with the work held until the burst was
acknowledged, 0.9x). Deferring the work costs nothing in durability: the event is in the
journal before its ack, as before.

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
# Work after an ack waits for a moment without requests at most this long (a steady stream
# of requests must not starve the answers). At 1 s, a burst of 500 events on a loaded 2-core
# machine outlasted it: the first events' work started while the last were being acked, and
# the last acks (the p99) waited behind it. 2 s covers such a burst; it delays answers only
# under more than 2 s of requests without a 10 ms gap (over 100 a second, sustained).
WORK_MAX_DEFER_S = 2.0
# Held work is released this many a turn of the event loop: a burst's 500 answers starting in
# one turn would hold the loop for every request arriving meanwhile.
RELEASE_PER_TURN = 16
# ...once no request has been handled for this long: a group commit acknowledges a burst's
# 100 requests in flight in one turn, and the senders' next ones come a few ms later.
QUIET_S = 0.010

Dispatch = Callable[[Any], Awaitable[Any]]  # bolt's `async_dispatch(AsyncBoltRequest)`


class RefusalLog:
    """Refused requests, logged as one line when the first comes, then one line a period with
    the counts by reason (a flood of forged requests must not flood the log)."""

    def __init__(self, *, every_s: float = REFUSAL_LOG_EVERY_S, clock: Callable[[], float]) -> None:
        self.every_s = every_s
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._since: float | None = None

    def refused(self, reason: str, peer: str | None) -> None:
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


class AckFirst:
    """Requests being handled (between `enter()` and `leave()`), and work held until there are
    none: `quiet()` returns once no request has been handled for `quiet_s`, or `max_defer_s`
    after the first of the waiters then held (one timer for them all). The held are released
    in order,
    `RELEASE_PER_TURN` a turn of the event loop, so requests arriving meanwhile are read
    between them."""

    def __init__(self, *, max_defer_s: float = WORK_MAX_DEFER_S, quiet_s: float = QUIET_S) -> None:
        self.max_defer_s = max_defer_s
        self.quiet_s = quiet_s
        self.active = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._quiet_timer: asyncio.TimerHandle | None = None

    def enter(self) -> None:
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active <= 0:
            self.active = 0
            if self._waiters and self._quiet_timer is None:
                loop = asyncio.get_running_loop()
                self._quiet_timer = loop.call_later(self.quiet_s, self._still_quiet)

    def _still_quiet(self) -> None:
        self._quiet_timer = None
        if self.active == 0:  # else the next `leave` looks again
            self._release()

    async def quiet(self) -> None:
        if self.active == 0:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if self._timer is None:
            self._timer = loop.call_later(self.max_defer_s, self._release)
        await waiter

    def _release(self) -> None:
        if self._quiet_timer is not None:
            self._quiet_timer.cancel()
            self._quiet_timer = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self._waiters = self._waiters, []
        self._wake(waiters)

    def _wake(self, waiters: list[asyncio.Future[None]]) -> None:
        now, rest = waiters[:RELEASE_PER_TURN], waiters[RELEASE_PER_TURN:]
        for waiter in now:
            if not waiter.done():  # (cancelled: a shutdown)
                waiter.set_result(None)
        if rest:  # after the woken tasks' first steps, in the next turn
            asyncio.get_running_loop().call_soon(self._wake, rest)


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
        self.ack_first = AckFirst()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.ack_first.enter()
        try:
            return await self._handle(request)
        finally:
            self.ack_first.leave()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
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
