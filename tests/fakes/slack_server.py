"""A fake Slack Web API and Socket Mode server on 127.0.0.1, for the real slack_sdk / slack_bolt.

Owns: `FakeSlack` (an aiohttp server on a random port) and `signed_request` (a correctly, or
deliberately wrongly, signed Events API / interactivity / slash-command request to a bolt app
in HTTP mode).

What it does the way Slack does on the wire:
- Web API methods at `api_url + method`, with arguments from the query string, a form body, a
  JSON body or a multipart body; `Authorization: Bearer xoxb-…` checked (else `invalid_auth`);
  answers HTTP 200 with `{"ok": ...}`; 429 with `Retry-After` when told to fail.
- Messages are stored per channel, so a test reads what a thread finally *shows*
  (`thread(channel, ts)`), not only which calls were made. Block Kit limits that Slack enforces
  (50 blocks, ~12,000 characters of `markdown` blocks per message, 3,000 per section text) are
  enforced here too, so a test cannot pass on a message Slack would refuse.
- Native streaming (`chat.startStream` / `appendStream` / `stopStream`) can be switched off
  (`streaming_error = "unknown_method"`), so fallbacks are tested. Slack ends a stream about
  five minutes after it started (undocumented; seen by other Slack AI apps): so does the fake,
  after `stream_max_age_s` (tests set about 1 s). The message keeps what it showed
  (`"streaming": "expired"`); later `appendStream` / `stopStream` calls answer
  `message_not_in_streaming_state`.
- Files: `add_file` hosts a file; a download without the bot token gets Slack's HTML login page
  with status 200. `files.getUploadURLExternal` hands out an upload URL served here.
- Socket Mode: `apps.connections.open` (app token) returns a `ws://` URL of this server, which
  says `hello`, sends envelopes (`socket_send`) and waits for the client's ack.

Every change (a call, an ack, a connection) notifies one condition: tests `wait_for` it, never
sleep.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl, urlencode

import aiohttp
from aiohttp import web

from tests.fakes.web_signin import SlackOidc

BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"
TEAM_ID = "T0TEAM"
BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
APP_ID = "A0APP"
DEFAULT_SCOPES = (
    "app_mentions:read,channels:history,groups:history,im:history,mpim:history,chat:write,"
    "reactions:write,users:read,files:read,files:write,commands,assistant:write"
)

MAX_BLOCKS = 50
MAX_MARKDOWN_CHARS = 12_000  # all `markdown` blocks of one message together
MAX_SECTION_TEXT = 3_000
MAX_TEXT_CHARS = 40_000
MAX_ATTACHMENTS = 100
STREAM_MAX_AGE_S = 300.0  # Slack ends a native stream after about five minutes
LOGIN_PAGE = (
    "<!DOCTYPE html><html><head><title>Slack</title></head>"
    "<body><h1>Sign in to Slack</h1></body></html>"
)


@dataclass(slots=True, frozen=True)
class Call:
    """One Web API call as received. Unpacks as `(method, args, headers)`."""

    method: str
    args: dict[str, Any]
    headers: dict[str, str]
    status: int = 200  # what the fake answered (429, 500 when a fault was injected)
    at: float = field(default_factory=time.monotonic)  # when it arrived (for benchmarks)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.method, self.args, self.headers))


@dataclass(slots=True)
class _Fault:
    status: int
    retry_after: int | None
    error: str
    times: int
    drop: bool  # process the call, then break the connection without an answer


@dataclass(slots=True)
class HostedFile:
    id: str
    name: str
    content: bytes
    mimetype: str
    title: str = ""
    channel: str | None = None
    thread_ts: str | None = None
    shared: bool = False

    def info(self, base_url: str) -> dict[str, Any]:
        url = f"{base_url}files/{self.id}/{self.name}"
        return {
            "id": self.id,
            "name": self.name,
            "title": self.title or self.name,
            "mimetype": self.mimetype,
            "filetype": self.name.rsplit(".", 1)[-1] if "." in self.name else "binary",
            "size": len(self.content),
            "url_private": url,
            "url_private_download": url + "?download=1",
        }


@dataclass(slots=True)
class _Socket:
    ws: web.WebSocketResponse
    closed: asyncio.Event = field(default_factory=asyncio.Event)


def _ts_key(ts: str) -> Decimal:
    try:
        return Decimal(ts)
    except Exception:
        return Decimal(0)


def _decode_json_field(value: Any) -> Any:
    """Form bodies carry `blocks` / `attachments` / `files` as JSON strings."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def block_problem(blocks: Any) -> str | None:
    """Why Slack would refuse these blocks (`invalid_blocks`), or None."""
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        return "blocks must be a list"
    if len(blocks) > MAX_BLOCKS:
        return f"{len(blocks)} blocks, more than {MAX_BLOCKS}"
    markdown = 0
    block_ids: set[str] = set()
    for block in blocks:
        if not isinstance(block, dict) or "type" not in block:
            return "a block without a type"
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in block_ids:
                return f"duplicate block_id {block_id}"
            block_ids.add(block_id)
        kind = block["type"]
        if kind == "markdown":
            markdown += len(block.get("text", ""))
        elif kind == "section":
            text = block.get("text") or {}
            if len(text.get("text", "")) > MAX_SECTION_TEXT:
                return "section text longer than 3000"
        elif kind == "context_actions" and len(block.get("elements", [])) > 5:
            return "context_actions holds at most 5 elements"
    if markdown > MAX_MARKDOWN_CHARS:
        return f"markdown blocks hold {markdown} characters, more than {MAX_MARKDOWN_CHARS}"
    return None


class FakeSlack:
    """`async with FakeSlack() as slack:` then point `AsyncWebClient(base_url=slack.api_url)`."""

    def __init__(
        self,
        *,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        team_id: str = TEAM_ID,
        bot_user_id: str = BOT_USER_ID,
        bot_id: str = BOT_ID,
        scopes: str = DEFAULT_SCOPES,
        stream_max_age_s: float = STREAM_MAX_AGE_S,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.scopes = scopes
        # None: native streaming works; else the error chat.*Stream answers ("unknown_method",
        # "not_allowed", ...).
        self.streaming_error: str | None = None
        # A native stream older than this is ended by Slack (see the module's docstring).
        self.stream_max_age_s = stream_max_age_s
        self._stream_started: dict[tuple[str, str], float] = {}  # (channel, ts) → monotonic
        # None: the assistant.threads.* methods work; else their error (e.g. "not_allowed").
        self.assistant_error: str | None = None
        self.calls: list[Call] = []
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.deleted: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []  # assistant.threads.setStatus arguments
        self.files: dict[str, HostedFile] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.acks: list[dict[str, Any]] = []
        self.connections = 0  # Socket Mode connections accepted so far
        self.replies_page_size = 100
        self._faults: dict[str, list[_Fault]] = {}
        self._delays: dict[str, float] = {}
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._sockets: list[_Socket] = []
        self._pending_acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._runner: web.AppRunner | None = None
        self.base_url = ""  # http://127.0.0.1:PORT/
        self.oidc = SlackOidc()  # Sign in with Slack (tests.fakes.web_signin)
        self.add_user(bot_user_id, "teammate", is_bot=True)

    # -- life cycle ----------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """For `AsyncWebClient(base_url=...)`: ends with `/`."""
        return self.base_url + "api/"

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        self._changed = asyncio.Condition()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/socket-mode/{ticket}", self._socket_mode)
        app.router.add_get("/openid/connect/authorize", self.oidc.authorize)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/"

    async def close(self) -> None:
        for sock in list(self._sockets):
            await sock.ws.close()
        for future in self._pending_acks.values():
            if not future.done():
                future.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- configuration -------------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        name: str,
        *,
        display_name: str | None = None,
        real_name: str | None = None,
        is_bot: bool = False,
        team_id: str | None = None,
    ) -> dict[str, Any]:
        user = {
            "id": user_id,
            "team_id": team_id or self.team_id,
            "name": name,
            "real_name": real_name if real_name is not None else name.title(),
            "is_bot": is_bot,
            "deleted": False,
            "profile": {
                "display_name": display_name if display_name is not None else name,
                "real_name": real_name if real_name is not None else name.title(),
            },
        }
        self.users[user_id] = user
        return user

    def add_channel(self, channel_id: str, name: str = "", **info: Any) -> dict[str, Any]:
        channel = _default_channel(channel_id) | {"name": name or channel_id.lower()} | info
        self.channels[channel_id] = channel
        return channel

    def add_file(
        self, name: str, content: bytes, mimetype: str = "application/octet-stream"
    ) -> dict[str, Any]:
        """Host a file; returns its Slack file object (`url_private_download` points here)."""
        hosted = HostedFile(
            id=f"F{next(self._ids):08d}", name=name, content=content, mimetype=mimetype
        )
        self.files[hosted.id] = hosted
        return hosted.info(self.base_url)

    def seed_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "UALICE",
        thread_ts: str | None = None,
        ts: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A message people posted earlier (for backfill through conversations.replies)."""
        message: dict[str, Any] = {"type": "message", "user": user, "text": text}
        message["ts"] = ts or self._next_ts()
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        message.update(extra)
        self._store(channel, message)
        return message

    def fail_next(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: int | None = 1,
        times: int = 1,
        error: str | None = None,
    ) -> None:
        """The next `times` calls of `method` answer `status` (429 with `Retry-After`, 500 …)
        without doing anything."""
        default = "ratelimited" if status == 429 else "internal_error"
        fault = _Fault(
            status, retry_after if status == 429 else None, error or default, times, False
        )
        self._faults.setdefault(method, []).append(fault)

    def drop_next(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls of `method` are carried out, then the connection is broken
        before the answer: what a transport error after a successful write looks like."""
        self._faults.setdefault(method, []).append(_Fault(0, None, "", times, True))

    def clear_faults(self) -> None:
        """Forget every fault still scripted (`fail_next`, `drop_next`): Slack is healthy."""
        self._faults.clear()

    def delay(self, method: str, seconds: float) -> None:
        """Answer `method` only after `seconds` (0 removes the delay)."""
        if seconds <= 0:
            self._delays.pop(method, None)
        else:
            self._delays[method] = seconds

    # -- what tests read -----------------------------------------------------------------------

    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return [
            call
            for call in self.calls
            if call.method == method and (not ok_only or call.status == 200)
        ]

    def methods(self) -> list[str]:
        return [call.method for call in self.calls]

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        for message in self.messages.get(channel, []):
            if message["ts"] == ts:
                return message
        return None

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """The thread as people see it now: the parent, then the replies, oldest first."""
        self._expire_streams()
        return [
            message
            for message in self.messages.get(channel, [])
            if message["ts"] == thread_ts or message.get("thread_ts") == thread_ts
        ]

    def bot_replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return [
            message
            for message in self.thread(channel, thread_ts)
            if message.get("bot_id") == self.bot_id and message["ts"] != thread_ts
        ]

    def reactions(self, channel: str, ts: str) -> list[str]:
        message = self.message(channel, ts)
        if message is None:
            return []
        return [reaction["name"] for reaction in message.get("reactions", [])]

    async def wait_for(self, predicate: Callable[[FakeSlack], bool], limit_s: float = 5.0) -> None:
        """Wait until `predicate(self)` holds; re-checked after every call and socket event."""
        assert self._changed is not None, "start the fake first"
        changed = self._changed

        async def _wait() -> None:
            async with changed:
                await changed.wait_for(lambda: predicate(self))

        await asyncio.wait_for(_wait(), limit_s)

    async def _notify(self) -> None:
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    # -- Socket Mode -----------------------------------------------------------------------------

    @property
    def socket_connected(self) -> bool:
        return any(not sock.ws.closed for sock in self._sockets)

    async def socket_send(
        self,
        payload: dict[str, Any],
        *,
        type: str = "events_api",
        retry_attempt: int = 0,
        retry_reason: str = "",
        accepts_response_payload: bool | None = None,
        limit_s: float = 5.0,
    ) -> dict[str, Any]:
        """Send one envelope on the newest open socket (waiting for one) and return the
        client's ack (`{"envelope_id": ..., "payload": ...?}`)."""
        await self.wait_for(lambda fake: fake.socket_connected, limit_s)
        sock = next(sock for sock in reversed(self._sockets) if not sock.ws.closed)
        envelope_id = str(uuid.uuid4())
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": type,
            "accepts_response_payload": (
                type == "slash_commands"
                if accepts_response_payload is None
                else accepts_response_payload
            ),
        }
        if type == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending_acks[envelope_id] = future
        try:
            await sock.ws.send_str(json.dumps(envelope))
            return await asyncio.wait_for(future, limit_s)
        finally:
            self._pending_acks.pop(envelope_id, None)

    async def disconnect(self, *, reason: str = "refresh_requested", warn: bool = True) -> None:
        """Drop the open sockets, as Slack does every few hours (with a `disconnect` message
        first when `warn`). The client reconnects through apps.connections.open."""
        for sock in list(self._sockets):
            if sock.ws.closed:
                continue
            if warn:
                message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}}
                await sock.ws.send_str(json.dumps(message))
            await sock.ws.close()
        await self._notify()

    def event_callback(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        team_id: str | None = None,
        event_time: int | None = None,
    ) -> dict[str, Any]:
        """The outer Events API payload around `event` (what HTTP mode posts and Socket Mode
        wraps in an envelope)."""
        return {
            "token": "verification-token-unused",
            "team_id": team_id or self.team_id,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):010d}",
            "event_time": event_time or int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": team_id or self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }

    async def _socket_mode(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        sock = _Socket(ws)
        self._sockets.append(sock)
        self.connections += 1
        hello = {
            "type": "hello",
            "num_connections": sum(1 for s in self._sockets if not s.ws.closed),
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        await ws.send_str(json.dumps(hello))
        await self._notify()
        try:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    ack = json.loads(message.data)
                except ValueError:
                    continue
                if not isinstance(ack, dict):
                    continue
                self.acks.append(ack)
                future = self._pending_acks.get(str(ack.get("envelope_id")))
                if future is not None and not future.done():
                    future.set_result(ack)
                await self._notify()
        finally:
            sock.closed.set()
            await self._notify()
        return ws

    # -- the Web API -------------------------------------------------------------------------------

    async def _arguments(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            content_type = request.content_type
            if content_type == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    args.update(body)
            elif content_type.startswith("multipart/"):
                form = await request.post()
                for name, value in form.items():
                    args[name] = value if isinstance(value, str) else value.file.read()
            else:
                raw = await request.text()
                args.update(dict(parse_qsl(raw, keep_blank_values=True)))
        return {name: _decode_json_field(value) for name, value in args.items()}

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args = await self._arguments(request)
        self._expire_streams()
        headers = {name.lower(): value for name, value in request.headers.items()}
        fault = self._take_fault(method)
        status = fault.status if fault is not None and not fault.drop else 200
        self.calls.append(Call(method, args, headers, status))
        await self._notify()
        delay = self._delays.get(method)
        if delay:
            await asyncio.sleep(delay)
        if fault is not None and not fault.drop:
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return web.json_response(
                {"ok": False, "error": fault.error}, status=fault.status, headers=extra
            )
        body, extra_headers = self._answer(method, args, headers)
        await self._notify()
        if fault is not None and fault.drop:
            transport = request.transport
            if transport is not None:
                transport.abort()  # the write happened; the answer never arrives
        return web.json_response(body, headers=extra_headers)

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.pop(0)
        return fault

    def _answer(
        self, method: str, args: dict[str, Any], headers: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        token = _bearer(headers, args)
        if method.startswith("openid.connect."):  # the person's token, not the bot's
            return self.oidc.answer(method, args, headers), {}
        if method == "apps.connections.open":
            if token != self.app_token:
                return _error("not_authed" if token is None else "invalid_auth"), {}
            ticket = uuid.uuid4().hex
            url = self.base_url.replace("http://", "ws://") + f"socket-mode/{ticket}"
            return {"ok": True, "url": url}, {}
        if token != self.bot_token:
            if token is None:
                return _error("not_authed"), {}
            return _error("invalid_auth"), {}
        handler = _HANDLERS.get(method)
        if handler is None:
            return _error("unknown_method"), {}
        body = handler(self, args)
        extra = {"x-oauth-scopes": self.scopes} if method == "auth.test" else {}
        return body, extra

    # -- storage ---------------------------------------------------------------------------------

    def _next_ts(self) -> str:
        n = next(self._ts)
        return f"{1_700_000_000 + n}.{n:06d}"

    def _store(self, channel: str, message: dict[str, Any]) -> None:
        messages = self.messages.setdefault(channel, [])
        messages.append(message)
        messages.sort(key=lambda m: _ts_key(m["ts"]))
        parent_ts = message.get("thread_ts")
        if parent_ts and parent_ts != message["ts"]:
            for parent in messages:
                if parent["ts"] == parent_ts:
                    parent["reply_count"] = parent.get("reply_count", 0) + 1
                    parent.setdefault("thread_ts", parent_ts)
                    break

    def _bot_message(self, args: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": APP_ID,
            "text": str(args.get("text") or "")[:MAX_TEXT_CHARS],
            "ts": self._next_ts(),
            "team": self.team_id,
        }
        for name in ("blocks", "attachments", "metadata"):
            if args.get(name) is not None:
                message[name] = args[name]
        if args.get("thread_ts"):
            message["thread_ts"] = str(args["thread_ts"])
        return message

    # -- methods -------------------------------------------------------------------------------

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake-team.slack.com/",
            "team": "Fake Team",
            "user": "teammate",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        if not channel:
            return _error("channel_not_found")
        if not (args.get("text") or args.get("blocks") or args.get("attachments")):
            return _error("no_text")
        problem = block_problem(args.get("blocks"))
        if problem is not None:
            return _error("invalid_blocks", detail=problem)
        if len(args.get("attachments") or []) > MAX_ATTACHMENTS:
            return _error("too_many_attachments")
        thread_ts = args.get("thread_ts")
        if thread_ts and self.message(channel, str(thread_ts)) is None:
            # Slack accepts a reply to a thread it cannot find as a top-level message; the
            # fake keeps it in the thread so tests still see it, but says so.
            pass
        message = self._bot_message(args)
        self._store(channel, message)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": dict(message)}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel"), str(args.get("ts") or "")
        message = self.message(channel, ts) if channel else None
        if message is None:
            return _error("message_not_found")
        if message.get("user") != self.bot_user_id:
            return _error("cant_update_message")
        problem = block_problem(args.get("blocks"))
        if problem is not None:
            return _error("invalid_blocks", detail=problem)
        if len(args.get("attachments") or []) > MAX_ATTACHMENTS:
            return _error("too_many_attachments")
        if "text" in args:
            message["text"] = str(args.get("text") or "")[:MAX_TEXT_CHARS]
        for name in ("blocks", "attachments", "metadata"):
            if name in args:
                if args[name] in ([], "", None):
                    message.pop(name, None)
                else:
                    message[name] = args[name]
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {"ok": True, "channel": channel, "ts": ts, "text": message["text"]}

    def _post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel"):
            return _error("channel_not_found")
        if not args.get("user"):
            return _error("user_not_found")
        if not (args.get("text") or args.get("blocks")):
            return _error("no_text")
        ts = self._next_ts()
        self.ephemerals.append({**args, "message_ts": ts})
        return {"ok": True, "message_ts": ts}

    def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel"), str(args.get("ts") or "")
        message = self.message(channel, ts) if channel else None
        if message is None:
            return _error("message_not_found")
        self.messages[channel].remove(message)
        self.deleted.append(message)
        return {"ok": True, "channel": channel, "ts": ts}

    def _reaction(self, args: dict[str, Any], *, add: bool) -> dict[str, Any]:
        channel, ts, name = args.get("channel"), str(args.get("timestamp") or ""), args.get("name")
        message = self.message(channel, ts) if channel else None
        if message is None:
            return _error("message_not_found")
        if not name:
            return _error("invalid_name")
        reactions: list[dict[str, Any]] = message.setdefault("reactions", [])
        existing = next((r for r in reactions if r["name"] == name), None)
        if add:
            if existing is not None and self.bot_user_id in existing["users"]:
                return _error("already_reacted")
            if existing is None:
                reactions.append({"name": name, "users": [self.bot_user_id], "count": 1})
            else:
                existing["users"].append(self.bot_user_id)
                existing["count"] += 1
        else:
            if existing is None or self.bot_user_id not in existing["users"]:
                return _error("no_reaction")
            existing["users"].remove(self.bot_user_id)
            existing["count"] -= 1
            if not existing["users"]:
                reactions.remove(existing)
        if not reactions:
            message.pop("reactions", None)
        return {"ok": True}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(args.get("user") or ""))
        if user is None:
            return _error("user_not_found")
        return {"ok": True, "user": user}

    def _replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel"), str(args.get("ts") or "")
        asked = self.message(channel, ts) if channel else None
        # A reply's ts reads its whole thread; the parent always comes first.
        parent_ts = str(asked.get("thread_ts") or ts) if asked is not None else ts
        thread = self.thread(channel, parent_ts) if channel else []
        if not thread:
            return _error("thread_not_found")
        oldest, latest = args.get("oldest"), args.get("latest")
        inclusive = str(args.get("inclusive") or "") in ("1", "true", "True")
        if oldest or latest:
            low = _ts_key(str(oldest)) if oldest else None
            high = _ts_key(str(latest)) if latest else None

            def within(message: dict[str, Any]) -> bool:
                key = _ts_key(message["ts"])
                if low is not None and (key < low or (key == low and not inclusive)):
                    return False
                return not (high is not None and (key > high or (key == high and not inclusive)))

            thread = thread[:1] + [m for m in thread[1:] if within(m)]
        limit = int(args.get("limit") or self.replies_page_size)
        limit = max(1, min(limit, 1000))
        start = int(args.get("cursor") or 0)
        page = thread[start : start + limit]
        more = start + limit < len(thread)
        return {
            "ok": True,
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel_id = str(args.get("channel") or "")
        if not channel_id:
            return _error("channel_not_found")
        return {
            "ok": True,
            "channel": self.channels.get(channel_id) or _default_channel(channel_id),
        }

    def _start_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        if (too_long := _stream_problem(args)) is not None:
            return _error(too_long)
        if self.streaming_error is not None:
            return _error(self.streaming_error)
        channel, thread_ts = args.get("channel"), args.get("thread_ts")
        if not channel:
            return _error("channel_not_found")
        if not thread_ts:
            return _error("invalid_arguments", detail="thread_ts is required")
        if not str(channel).startswith("D") and not (
            args.get("recipient_user_id") and args.get("recipient_team_id")
        ):
            return _error("invalid_arguments", detail="recipient_user_id and recipient_team_id")
        message = self._bot_message({"thread_ts": thread_ts})
        message["text"] = _chunk_text(args)
        message["streaming"] = "in_progress"
        self._store(channel, message)
        self._stream_started[(str(channel), message["ts"])] = time.monotonic()
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    def _expire_streams(self) -> None:
        """Slack ends a stream `stream_max_age_s` after it started: it shows what it had."""
        now = time.monotonic()
        for (channel, ts), started in list(self._stream_started.items()):
            if now - started < self.stream_max_age_s:
                continue
            del self._stream_started[(channel, ts)]
            message = self.message(channel, ts)
            if message is not None and message.get("streaming") == "in_progress":
                message["streaming"] = "expired"

    async def stream_expired(self, channel: str, ts: str) -> None:
        """Return once Slack would have ended the stream `ts` (its age passed)."""
        started = self._stream_started.get((channel, ts))
        if started is not None:
            await asyncio.sleep(max(0.0, started + self.stream_max_age_s - time.monotonic()))
        self._expire_streams()

    def _streaming_message(self, args: dict[str, Any]) -> dict[str, Any] | str:
        if self.streaming_error is not None:
            return self.streaming_error
        channel, ts = args.get("channel"), str(args.get("ts") or "")
        message = self.message(channel, ts) if channel else None
        if message is None:
            return "message_not_found"
        if message.get("streaming") != "in_progress":
            return "message_not_in_streaming_state"
        return message

    def _append_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        if (too_long := _stream_problem(args)) is not None:
            return _error(too_long)
        message = self._streaming_message(args)
        if isinstance(message, str):
            return _error(message)
        message["text"] = (message["text"] + _chunk_text(args))[:MAX_TEXT_CHARS]
        return {"ok": True, "channel": args["channel"], "ts": message["ts"]}

    def _stop_stream(self, args: dict[str, Any]) -> dict[str, Any]:
        if (too_long := _stream_problem(args)) is not None:
            return _error(too_long)
        message = self._streaming_message(args)
        if isinstance(message, str):
            return _error(message)
        problem = block_problem(args.get("blocks"))
        if problem is not None:
            return _error("invalid_blocks", detail=problem)
        message["text"] = (message["text"] + _chunk_text(args))[:MAX_TEXT_CHARS]
        message["streaming"] = "completed"
        self._stream_started.pop((str(args["channel"]), message["ts"]), None)
        if args.get("blocks"):
            message["blocks"] = args["blocks"]
        return {"ok": True, "channel": args["channel"], "ts": message["ts"], "message": message}

    def _get_upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        name = str(args.get("filename") or "")
        try:
            length = int(args.get("length") or -1)
        except ValueError:
            length = -1
        if not name or length < 0:
            return _error("invalid_arguments")
        hosted = HostedFile(id=f"F{next(self._ids):08d}", name=name, content=b"", mimetype="")
        self.files[hosted.id] = hosted
        return {
            "ok": True,
            "upload_url": f"{self.base_url}upload/{hosted.id}",
            "file_id": hosted.id,
        }

    def _complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        entries = args.get("files")
        if not isinstance(entries, list) or not entries:
            return _error("invalid_arguments")
        channel = args.get("channel_id") or None
        thread_ts = args.get("thread_ts") or None
        infos = []
        for entry in entries:
            hosted = self.files.get(str(entry.get("id")))
            if hosted is None:
                return _error("file_not_found")
            hosted.title = str(entry.get("title") or hosted.name)
            hosted.channel, hosted.thread_ts, hosted.shared = channel, thread_ts, bool(channel)
            infos.append(hosted.info(self.base_url))
        if channel:
            message = self._bot_message({"text": args.get("initial_comment") or ""})
            message["files"] = infos
            message["upload"] = True
            if thread_ts:
                message["thread_ts"] = str(thread_ts)
            self._store(channel, message)
        return {"ok": True, "files": infos}

    def _assistant(self, args: dict[str, Any], what: str) -> dict[str, Any]:
        if self.assistant_error is not None:
            return _error(self.assistant_error)
        if not args.get("channel_id") or (what != "prompts" and not args.get("thread_ts")):
            return _error("invalid_arguments")
        if what == "status":
            self.statuses.append(dict(args))
        return {"ok": True}

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        hosted = self.files.get(request.match_info["file_id"])
        if hosted is None:
            return web.Response(status=404, text="not found", content_type="text/plain")
        data = await request.read()
        if request.content_type.startswith("multipart/"):
            return web.Response(status=400, text="send the raw bytes", content_type="text/plain")
        hosted.content = data
        await self._notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        hosted = self.files.get(request.match_info["file_id"])
        token = _bearer({k.lower(): v for k, v in request.headers.items()}, {})
        if token != self.bot_token:
            # Slack answers an unauthenticated download with its sign-in page, status 200.
            return web.Response(text=LOGIN_PAGE, content_type="text/html")
        if hosted is None or hosted.name != request.match_info["name"]:
            return web.Response(status=404, text="file not found", content_type="text/plain")
        return web.Response(
            body=hosted.content, content_type=hosted.mimetype or "application/octet-stream"
        )


def _chunk_text(args: dict[str, Any]) -> str:
    text = str(args.get("markdown_text") or "")
    for chunk in args.get("chunks") or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text


def _stream_problem(args: dict[str, Any]) -> str | None:
    """Slack takes at most 12,000 characters of Markdown per streaming call."""
    if len(_chunk_text(args)) > MAX_MARKDOWN_CHARS:
        return "msg_too_long"
    return None


def _default_channel(channel_id: str) -> dict[str, Any]:
    is_im = channel_id.startswith("D")
    return {
        "id": channel_id,
        "name": channel_id.lower(),
        "is_channel": channel_id.startswith("C"),
        "is_group": channel_id.startswith("G"),
        "is_im": is_im,
        "is_mpim": False,
        "is_private": not channel_id.startswith("C"),
        "is_member": True,
        "is_archived": False,
    }


def _bearer(headers: dict[str, str], args: dict[str, Any]) -> str | None:
    value = headers.get("authorization", "")
    if value.lower().startswith("bearer "):
        return value[7:].strip()
    token = args.get("token")
    return str(token) if token else None


def _error(error: str, *, detail: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"ok": False, "error": error}
    if detail:
        body["response_metadata"] = {"messages": [f"[ERROR] {detail}"]}
    return body


_HANDLERS: dict[str, Callable[[FakeSlack, dict[str, Any]], dict[str, Any]]] = {
    "auth.test": FakeSlack._auth_test,
    "chat.postMessage": FakeSlack._post_message,
    "chat.update": FakeSlack._update,
    "chat.postEphemeral": FakeSlack._post_ephemeral,
    "chat.delete": FakeSlack._delete,
    "reactions.add": lambda fake, args: fake._reaction(args, add=True),
    "reactions.remove": lambda fake, args: fake._reaction(args, add=False),
    "users.info": FakeSlack._users_info,
    "conversations.replies": FakeSlack._replies,
    "conversations.info": FakeSlack._conversations_info,
    "chat.startStream": FakeSlack._start_stream,
    "chat.appendStream": FakeSlack._append_stream,
    "chat.stopStream": FakeSlack._stop_stream,
    "files.getUploadURLExternal": FakeSlack._get_upload_url,
    "files.completeUploadExternal": FakeSlack._complete_upload,
    "assistant.threads.setStatus": lambda fake, args: fake._assistant(args, "status"),
    "assistant.threads.setSuggestedPrompts": lambda fake, args: fake._assistant(args, "prompts"),
    "assistant.threads.setTitle": lambda fake, args: fake._assistant(args, "title"),
}


# -- HTTP mode: signed requests --------------------------------------------------------------------


def sign(body: str, signing_secret: str, timestamp: int) -> str:
    """Slack's `X-Slack-Signature`: v0= HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


def form_body(fields: dict[str, Any]) -> str:
    """A slash command's body (form-encoded fields)."""
    return urlencode({name: str(value) for name, value in fields.items()})


def interactive_body(payload: dict[str, Any]) -> str:
    """An interactivity request's body: `payload=<json>`, form-encoded."""
    return urlencode({"payload": json.dumps(payload)})


@dataclass(slots=True, frozen=True)
class SignedResponse:
    status: int
    text: str
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.text)


async def signed_request(
    url: str,
    body: dict[str, Any] | str,
    signing_secret: str,
    timestamp: int | None = None,
    *,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
    wrong_signature: bool = False,
    content_type: str | None = None,
    session: aiohttp.ClientSession | None = None,
) -> SignedResponse:
    """POST a signed Slack request to a bolt app in HTTP mode.

    `body`: a dict is sent as JSON (Events API); a str as is (use `form_body` for a slash command,
    `interactive_body` for a button click; those go form-encoded). `timestamp` defaults to now;
    pass an old one for a stale request; `wrong_signature` signs with a different secret.
    `retry_num` adds Slack's `X-Slack-Retry-Num` / `X-Slack-Retry-Reason` headers.
    """
    if isinstance(body, dict):
        raw = json.dumps(body)
        kind = content_type or "application/json"
    else:
        raw = body
        kind = content_type or "application/x-www-form-urlencoded"
    stamp = int(time.time()) if timestamp is None else timestamp
    secret = signing_secret + "-wrong" if wrong_signature else signing_secret
    headers = {
        "Content-Type": kind,
        "X-Slack-Request-Timestamp": str(stamp),
        "X-Slack-Signature": sign(raw, secret, stamp),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    own = session is None
    client = session or aiohttp.ClientSession()
    try:
        async with client.post(url, data=raw.encode(), headers=headers) as response:
            text = await response.text()
            return SignedResponse(response.status, text, dict(response.headers))
    finally:
        if own:
            await client.close()
