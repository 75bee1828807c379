"""Events routed straight to Teammate's handlers: the routes bolt's own listeners gave, and
the acknowledgement's rules kept (an event not written down is not acknowledged)."""

from __future__ import annotations

from typing import Any

from bots.platforms.slack.event_route import EventRoute, Route, route_of


def _callback(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event_callback", "event": event}


def test_each_event_takes_the_route_bolts_listeners_gave_it() -> None:
    im = {"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "ts": "2.0"}
    assert route_of(_callback({**im, "thread_ts": "1.0"})) is Route.ASSISTANT
    # A DM outside an AI-app thread, or a bot's post in one: the message listener's.
    assert route_of(_callback(im)) is Route.EVENT
    assert route_of(_callback({**im, "thread_ts": "1.0", "bot_id": "B1"})) is Route.EVENT
    edited = {
        "type": "message",
        "subtype": "message_changed",
        "channel_type": "im",
        "message": {"thread_ts": "1.0", "text": "edited"},
    }
    assert route_of(_callback(edited)) is Route.ACK_ONLY
    assert route_of(_callback({"type": "assistant_thread_context_changed"})) is Route.ACK_ONLY
    assert route_of(_callback({"type": "assistant_thread_started"})) is Route.ASSISTANT
    assert route_of(_callback({"type": "app_mention", "channel": "C1"})) is Route.EVENT
    assert route_of(_callback({"type": "agent_session_stopped"})) is Route.NATIVE_STOP
    # Not events: bolt's listeners (buttons, slash commands) and its own checks decide.
    assert route_of({"type": "block_actions", "actions": []}) is Route.BOLT
    assert route_of({"command": "/teammate", "text": "help"}) is Route.BOLT
    assert route_of({"type": "event_callback"}) is Route.BOLT  # no event in it


async def test_through_bolt_an_event_is_acknowledged_only_once_its_handler_returned() -> None:
    """A real bolt app with the route in front: a handler that fails (the journal could not
    write the event down) gets no acknowledgement, so Slack delivers the event again; while
    closing nothing is acknowledged; what is not an event reaches bolt's listeners."""
    from slack_bolt.app.async_app import AsyncApp
    from slack_bolt.authorization import AuthorizeResult
    from slack_bolt.request.async_request import AsyncBoltRequest

    closing = False
    handled: list[str] = []
    clicked: list[str] = []

    async def written_down(body: dict[str, Any]) -> None:
        if body["event"].get("text") == "disk full":
            raise OSError("no space left on device")
        handled.append(body["event"]["text"])

    async def authorize(**_kwargs: Any) -> AuthorizeResult:  # no auth.test: no network
        return AuthorizeResult(
            enterprise_id=None, team_id="T1", bot_token="xoxb-test", bot_user_id="UB", bot_id="B1"
        )

    bolt = AsyncApp(
        signing_secret="",
        authorize=authorize,
        request_verification_enabled=False,
        process_before_response=True,
    )
    route = EventRoute(closing=lambda: closing)
    route.handle(Route.EVENT, written_down)
    bolt.use(route)

    @bolt.action("stop")
    async def on_click(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        clicked.append(body["user"]["id"])

    async def send(body: dict[str, Any]) -> int:
        response = await bolt.async_dispatch(AsyncBoltRequest(body=body, mode="socket_mode"))
        return int(response.status)

    mention = {"type": "app_mention", "channel": "C1", "user": "U1", "ts": "1.0"}
    assert await send({**_callback({**mention, "text": "hello"}), "team_id": "T1"}) == 200
    assert await send({**_callback({**mention, "text": "disk full"}), "team_id": "T1"}) == 500
    assert handled == ["hello"]
    changed = _callback({"type": "assistant_thread_context_changed"})
    assert await send({**changed, "team_id": "T1"}) == 200 and handled == ["hello"]
    click = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": "U7"},
        "actions": [{"action_id": "stop", "type": "button", "value": "1"}],
    }
    assert await send(click) == 200 and clicked == ["U7"]
    closing = True
    assert await send({**_callback({**mention, "text": "late"}), "team_id": "T1"}) == 503
    assert handled == ["hello"]
