"""The fake Slack answers the real slack_sdk the way Slack does (so other tests can trust it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import (
    LOGIN_PAGE,
    FakeSlack,
    form_body,
    interactive_body,
    sign,
    signed_request,
)


async def test_auth_and_scopes(fake_slack: FakeSlack, slack_client: AsyncWebClient) -> None:
    fake_slack.scopes = "chat:write,reactions:write"
    response = await slack_client.auth_test()
    assert response["user_id"] == fake_slack.bot_user_id
    assert response["bot_id"] == fake_slack.bot_id
    assert response["team_id"] == fake_slack.team_id
    assert response.headers["x-oauth-scopes"] == "chat:write,reactions:write"
    method, _args, headers = fake_slack.calls[0]
    assert method == "auth.test"
    assert headers["authorization"] == f"Bearer {fake_slack.bot_token}"

    wrong = AsyncWebClient(token="xoxb-wrong", base_url=fake_slack.api_url, retry_handlers=[])
    with pytest.raises(SlackApiError) as raised:
        await wrong.auth_test()
    assert raised.value.response["error"] == "invalid_auth"
    missing = AsyncWebClient(base_url=fake_slack.api_url, retry_handlers=[])
    with pytest.raises(SlackApiError) as raised:
        await missing.chat_postMessage(channel="C1", text="hi")
    assert raised.value.response["error"] == "not_authed"
    assert fake_slack.thread("C1", "x") == []


async def test_thread_state_form_and_json(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    parent = fake_slack.seed_message("C1", "<@UBOT> hello", user="UALICE")
    first = await slack_client.chat_postMessage(
        channel="C1",
        thread_ts=parent["ts"],
        text="working",
        blocks=[{"type": "markdown", "text": "working"}],
    )
    # Form-encoded arguments (api_call with data=) land the same way as JSON.
    second = await slack_client.api_call(
        "chat.postMessage",
        data={"channel": "C1", "thread_ts": parent["ts"], "text": "second"},
    )
    assert float(second["ts"]) > float(first["ts"])
    await slack_client.chat_update(
        channel="C1", ts=first["ts"], text="done", blocks=[{"type": "markdown", "text": "done"}]
    )
    thread = fake_slack.thread("C1", parent["ts"])
    assert [m["text"] for m in thread] == ["<@UBOT> hello", "done", "second"]
    assert thread[1]["blocks"] == [{"type": "markdown", "text": "done"}]
    assert thread[0]["reply_count"] == 2
    assert [m["text"] for m in fake_slack.bot_replies("C1", parent["ts"])] == ["done", "second"]
    await slack_client.chat_delete(channel="C1", ts=second["ts"])
    assert [m["text"] for m in fake_slack.bot_replies("C1", parent["ts"])] == ["done"]
    with pytest.raises(SlackApiError) as raised:
        await slack_client.chat_update(channel="C1", ts="1.000001", text="x")
    assert raised.value.response["error"] == "message_not_found"


async def test_block_limits_enforced(fake_slack: FakeSlack, slack_client: AsyncWebClient) -> None:
    too_many = [{"type": "markdown", "text": "x"}] * 51
    too_long = [{"type": "markdown", "text": "x" * 7000}, {"type": "markdown", "text": "y" * 6000}]
    for blocks in (too_many, too_long):
        with pytest.raises(SlackApiError) as raised:
            await slack_client.chat_postMessage(channel="C1", text="t", blocks=blocks)
        assert raised.value.response["error"] == "invalid_blocks"
    assert fake_slack.messages.get("C1", []) == []


async def test_reactions_users_ephemeral_info(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    message = fake_slack.seed_message("C1", "hi")
    await slack_client.reactions_add(channel="C1", timestamp=message["ts"], name="eyes")
    with pytest.raises(SlackApiError) as raised:
        await slack_client.reactions_add(channel="C1", timestamp=message["ts"], name="eyes")
    assert raised.value.response["error"] == "already_reacted"
    await slack_client.reactions_add(channel="C1", timestamp=message["ts"], name="white_check_mark")
    await slack_client.reactions_remove(channel="C1", timestamp=message["ts"], name="eyes")
    assert fake_slack.reactions("C1", message["ts"]) == ["white_check_mark"]

    fake_slack.add_user("UALICE", "alice", display_name="Alice L", real_name="Alice Liddell")
    user = (await slack_client.users_info(user="UALICE"))["user"]
    assert user["profile"]["display_name"] == "Alice L"
    assert user["is_bot"] is False
    assert (await slack_client.users_info(user="UBOT"))["user"]["is_bot"] is True

    await slack_client.chat_postEphemeral(channel="C1", user="UALICE", text="only you")
    assert fake_slack.ephemerals[0]["user"] == "UALICE"
    assert fake_slack.thread("C1", message["ts"]) == [message]

    assert (await slack_client.conversations_info(channel="D123"))["channel"]["is_im"] is True
    fake_slack.add_channel("C9", "general")
    assert (await slack_client.conversations_info(channel="C9"))["channel"]["name"] == "general"


async def test_replies_paginate(fake_slack: FakeSlack, slack_client: AsyncWebClient) -> None:
    parent = fake_slack.seed_message("C1", "start")
    for n in range(5):
        fake_slack.seed_message("C1", f"reply {n}", thread_ts=parent["ts"])
    fake_slack.seed_message("C1", "another thread")
    texts: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await slack_client.conversations_replies(
            channel="C1", ts=parent["ts"], limit=2, cursor=cursor
        )
        pages += 1
        texts += [m["text"] for m in page["messages"]]
        cursor = page["response_metadata"]["next_cursor"]
        if not page["has_more"]:
            break
    assert texts == ["start"] + [f"reply {n}" for n in range(5)]
    assert pages == 3
    replies = fake_slack.thread("C1", parent["ts"])
    # A reply's ts reads the whole thread; oldest/inclusive narrow the replies.
    page = await slack_client.conversations_replies(channel="C1", ts=replies[3]["ts"])
    assert [m["text"] for m in page["messages"]] == texts
    page = await slack_client.conversations_replies(
        channel="C1", ts=parent["ts"], oldest=replies[3]["ts"], inclusive=True
    )
    assert [m["text"] for m in page["messages"]] == ["start", "reply 2", "reply 3", "reply 4"]
    with pytest.raises(SlackApiError):
        await slack_client.conversations_replies(channel="C1", ts="9.9")


async def test_native_stream_and_switching_it_off(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    parent = fake_slack.seed_message("C1", "q")
    with pytest.raises(SlackApiError) as raised:  # channels need a recipient
        await slack_client.chat_startStream(channel="C1", thread_ts=parent["ts"])
    assert raised.value.response["error"] == "invalid_arguments"
    stream = await slack_client.chat_stream(
        channel="C1",
        thread_ts=parent["ts"],
        recipient_user_id="UALICE",
        recipient_team_id=fake_slack.team_id,
        buffer_size=4,
    )
    await stream.append(markdown_text="**hello ")
    await stream.append(markdown_text="world**")
    await stream.stop(blocks=[{"type": "context", "elements": [{"type": "mrkdwn", "text": "f"}]}])
    reply = fake_slack.bot_replies("C1", parent["ts"])[0]
    assert reply["text"] == "**hello world**"
    assert reply["streaming"] == "completed"
    assert reply["blocks"][0]["type"] == "context"
    with pytest.raises(SlackApiError) as raised:
        await slack_client.chat_appendStream(channel="C1", ts=reply["ts"], markdown_text="late")
    assert raised.value.response["error"] == "message_not_in_streaming_state"

    with pytest.raises(SlackApiError) as raised:  # 12,000 characters per call at most
        await slack_client.chat_startStream(
            channel="D1", thread_ts="1.1", markdown_text="x" * 12_001
        )
    assert raised.value.response["error"] == "msg_too_long"

    fake_slack.streaming_error = "unknown_method"
    with pytest.raises(SlackApiError) as raised:
        await slack_client.chat_startStream(channel="D1", thread_ts="1.1")
    assert raised.value.response["error"] == "unknown_method"


async def test_a_native_stream_ends_once_it_is_older_than_slack_allows(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.stream_max_age_s = 0.3
    parent = fake_slack.seed_message("D1", "q")
    started = await slack_client.chat_startStream(
        channel="D1", thread_ts=parent["ts"], markdown_text="so far"
    )
    await slack_client.chat_appendStream(channel="D1", ts=started["ts"], markdown_text=", more")
    await fake_slack.stream_expired("D1", started["ts"])
    for method in (slack_client.chat_appendStream, slack_client.chat_stopStream):
        with pytest.raises(SlackApiError) as raised:
            await method(channel="D1", ts=started["ts"], markdown_text="lost")
        assert raised.value.response["error"] == "message_not_in_streaming_state"
    reply = fake_slack.bot_replies("D1", parent["ts"])[0]
    assert (reply["text"], reply["streaming"]) == ("so far, more", "expired")
    # It is an ordinary message now: it can be updated.
    await slack_client.chat_update(channel="D1", ts=started["ts"], text="whole")
    assert fake_slack.bot_replies("D1", parent["ts"])[0]["text"] == "whole"


async def test_files_upload_v2_and_downloads(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    parent = fake_slack.seed_message("C1", "q")
    result = await slack_client.files_upload_v2(
        channel="C1",
        thread_ts=parent["ts"],
        filename="report.csv",
        content=b"a,b\n1,2\n",
        title="Report",
    )
    file_id = result["file"]["id"]
    hosted = fake_slack.files[file_id]
    assert hosted.content == b"a,b\n1,2\n"
    assert (hosted.channel, hosted.thread_ts, hosted.title) == ("C1", parent["ts"], "Report")
    shared = fake_slack.bot_replies("C1", parent["ts"])
    assert shared[0]["files"][0]["id"] == file_id

    info = fake_slack.add_file("cat.png", b"\x89PNG fake", "image/png")
    async with aiohttp.ClientSession() as session:
        url = info["url_private_download"]
        async with session.get(
            url, headers={"Authorization": f"Bearer {fake_slack.bot_token}"}
        ) as r:
            assert r.status == 200
            assert await r.read() == b"\x89PNG fake"
        async with session.get(url) as r:  # no token: Slack's sign-in page, with 200
            assert r.status == 200
            assert r.content_type == "text/html"
            assert await r.text() == LOGIN_PAGE


async def test_assistant_methods(fake_slack: FakeSlack, slack_client: AsyncWebClient) -> None:
    await slack_client.assistant_threads_setStatus(
        channel_id="D1", thread_ts="1.1", status="thinking…"
    )
    await slack_client.assistant_threads_setSuggestedPrompts(
        channel_id="D1", thread_ts="1.1", prompts=[{"title": "a", "message": "b"}]
    )
    await slack_client.assistant_threads_setTitle(channel_id="D1", thread_ts="1.1", title="t")
    assert fake_slack.statuses[0]["status"] == "thinking…"
    fake_slack.assistant_error = "not_allowed"
    with pytest.raises(SlackApiError):
        await slack_client.assistant_threads_setStatus(channel_id="D1", thread_ts="1.1", status="x")


async def test_rate_limit_with_retry_after(fake_slack: FakeSlack) -> None:
    fake_slack.fail_next("chat.postMessage", 429, retry_after=0, times=2)
    client = AsyncWebClient(
        token=fake_slack.bot_token,
        base_url=fake_slack.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=2)],
    )
    await client.chat_postMessage(channel="C1", text="once")
    assert [c.status for c in fake_slack.calls_to("chat.postMessage")] == [429, 429, 200]
    assert len(fake_slack.messages["C1"]) == 1  # a refused call stored nothing

    fake_slack.fail_next("chat.update", 429, retry_after=7)
    bare = AsyncWebClient(
        token=fake_slack.bot_token, base_url=fake_slack.api_url, retry_handlers=[]
    )
    with pytest.raises(SlackApiError) as raised:
        await bare.chat_update(channel="C1", ts="1.1", text="x")
    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "7"
    fake_slack.fail_next("auth.test", 500)
    with pytest.raises(SlackApiError) as raised:
        await bare.auth_test()
    assert raised.value.response.status_code == 500
    for c in (client, bare):
        if c.session is not None:
            await c.session.close()


async def test_drop_after_write_is_a_transport_error(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.drop_next("chat.postMessage")
    with pytest.raises(aiohttp.ClientError):
        await slack_client.chat_postMessage(channel="C1", text="written, unanswered")
    assert [m["text"] for m in fake_slack.messages["C1"]] == ["written, unanswered"]


async def test_delay_and_wait_for(fake_slack: FakeSlack, slack_client: AsyncWebClient) -> None:
    fake_slack.delay("chat.postMessage", 0.2)
    task = asyncio.create_task(slack_client.chat_postMessage(channel="C1", text="slow"))
    await fake_slack.wait_for(lambda f: len(f.calls_to("chat.postMessage")) == 1)
    assert not task.done()  # recorded at once, answered later
    await task
    fake_slack.delay("chat.postMessage", 0)


async def test_socket_mode_envelopes_acks_and_reconnect(fake_slack: FakeSlack) -> None:
    web_client = AsyncWebClient(base_url=fake_slack.api_url, retry_handlers=[])
    client = SocketModeClient(
        app_token=fake_slack.app_token, web_client=web_client, ping_interval=0.5
    )
    received: list[SocketModeRequest] = []

    async def listener(c: Any, request: SocketModeRequest) -> None:
        received.append(request)
        payload = {"text": "pong"} if request.type == "slash_commands" else None
        await c.send_socket_mode_response(SocketModeResponse(request.envelope_id, payload=payload))

    client.socket_mode_request_listeners.append(listener)
    await client.connect()
    try:
        event = fake_slack.event_callback({"type": "app_mention", "text": "hi", "user": "UA"})
        ack = await fake_slack.socket_send(event, retry_attempt=1, retry_reason="timeout")
        assert received[0].type == "events_api"
        assert received[0].retry_attempt == 1
        assert received[0].payload["event"]["text"] == "hi"
        assert ack["envelope_id"] == received[0].envelope_id

        ack = await fake_slack.socket_send(
            {"command": "/teammate", "text": "help"}, type="slash_commands"
        )
        assert ack["payload"] == {"text": "pong"}
        assert [c.method for c in fake_slack.calls] == ["apps.connections.open"]
        assert fake_slack.calls[0].headers["authorization"] == f"Bearer {fake_slack.app_token}"

        await fake_slack.disconnect()
        ack = await fake_slack.socket_send(event, retry_attempt=2, limit_s=10)
        assert fake_slack.connections >= 2
        assert len(fake_slack.calls_to("apps.connections.open")) >= 2
        assert received[-1].retry_attempt == 2
    finally:
        await client.close()
        if web_client.session is not None:
            await web_client.session.close()


async def test_connections_open_needs_the_app_token(fake_slack: FakeSlack) -> None:
    client = AsyncWebClient(
        token=fake_slack.bot_token, base_url=fake_slack.api_url, retry_handlers=[]
    )
    with pytest.raises(SlackApiError) as raised:
        await client.apps_connections_open(app_token=fake_slack.bot_token)
    assert raised.value.response["error"] == "invalid_auth"
    if client.session is not None:
        await client.session.close()


async def test_signed_request_signature() -> None:
    seen: list[tuple[dict[str, str], str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.text()))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/slack/events", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/slack/events"
    try:
        response = await signed_request(
            url, {"type": "url_verification"}, "s3cret", 1_700_000_000, retry_num=1
        )
        assert response.status == 200 and response.json() == {"ok": True}
        headers, body = seen[0]
        assert json.loads(body) == {"type": "url_verification"}
        assert headers["X-Slack-Signature"] == sign(body, "s3cret", 1_700_000_000)
        assert headers["X-Slack-Retry-Num"] == "1"
        await signed_request(
            url, form_body({"command": "/teammate"}), "s3cret", wrong_signature=True
        )
        headers, body = seen[1]
        assert body == "command=%2Fteammate"
        assert headers["X-Slack-Signature"] != sign(
            body, "s3cret", int(headers["X-Slack-Request-Timestamp"])
        )
        assert interactive_body({"a": 1}).startswith("payload=")
    finally:
        await runner.cleanup()
