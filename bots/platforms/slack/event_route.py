"""Slack's events routed to Teammate's handlers in one step, ahead of bolt's listener matching.

Owns: `EventRoute`, the bolt middleware every request passes after bolt's own (signature,
authorization, self-events, URL verification): while the app is closing it answers 503 (not
acknowledged: Slack delivers the event again, to the next process); an `event_callback` it
hands to the handler for its kind and acknowledges when the handler returns (200) or fails
(500: Slack delivers it again); anything else (buttons, slash commands) goes on to bolt's
listeners. `route_of` is the decision, on bolt's own payload predicates, so an event reaches the
handler bolt's `AsyncAssistant` middleware and `app.event` listeners would have given it.

Why not bolt's listeners for events: every request ran the matchers of each assistant
sub-listener and of each event listener before its own, and bolt builds every listener
argument (a `say`, a `respond`, a `say_stream`...) for each matcher. Profiled in a burst of
500 events, that matching was 45 % of the acknowledgement's time and put the ack p99 at 1.4-
1.6x a bare bolt app's even with all work deferred; here an event costs a few dict lookups.

Must not: do an event's work before the acknowledgement (the handlers only write the journal
and schedule it), or parse a payload beyond choosing the route.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.payload_utils import (
    is_assistant_thread_context_changed_event,
    is_assistant_thread_started_event,
    is_event,
    is_other_message_sub_event_in_assistant_thread,
    is_user_message_event_in_assistant_thread,
)
from slack_bolt.response import BoltResponse

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[None]]


class Route(enum.Enum):
    ASSISTANT = "assistant"  # an AI-app thread started, or a person's message in one
    EVENT = "event"  # a mention or a message anywhere else
    NATIVE_STOP = "native_stop"  # the Stop of Slack's own AI-app UI
    ACK_ONLY = "ack_only"  # acknowledged and nothing more (context changes, sub-events)
    BOLT = "bolt"  # not an event Teammate handles here: bolt's listeners decide


def route_of(body: dict[str, Any]) -> Route:
    """Where an event goes, as bolt's `AsyncAssistant` and `app.event` listeners would send it."""
    if not is_event(body):
        return Route.BOLT
    if is_assistant_thread_started_event(body) or is_user_message_event_in_assistant_thread(body):
        return Route.ASSISTANT
    if is_assistant_thread_context_changed_event(body):
        return Route.ACK_ONLY  # Teammate does not use the channel a person is viewing
    if is_other_message_sub_event_in_assistant_thread(body):
        return Route.ACK_ONLY  # an edit or deletion in an AI-app thread, as bolt acks it
    kind = body["event"]["type"]
    if kind in ("app_mention", "message"):
        return Route.EVENT
    if kind == "agent_session_stopped":
        return Route.NATIVE_STOP
    return Route.BOLT


class EventRoute(AsyncMiddleware):
    """The middleware: the closing refusal, then each event to its handler, acknowledged."""

    def __init__(self, closing: Callable[[], bool]) -> None:
        self._closing = closing
        self._handlers: dict[Route, Handler] = {}

    def handle(self, route: Route, handler: Handler) -> None:
        self._handlers[route] = handler

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],
    ) -> BoltResponse | None:
        if self._closing():
            # Not acknowledged: Slack delivers it again, to the next process.
            return BoltResponse(status=503, body="shutting down")
        body = req.body
        route = route_of(body)
        handler = self._handlers.get(route)
        if route is Route.ACK_ONLY:
            return BoltResponse(status=200, body="")
        if handler is None:
            await next()
            return resp
        try:
            await handler(body)
        except Exception:
            # Not written down in time (or a bug): not acknowledged, so Slack sends it again.
            log.exception("a Slack %s event could not be taken; Slack will retry it", route.value)
            return BoltResponse(status=500, body="")
        return BoltResponse(status=200, body="")
