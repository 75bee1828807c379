"""A fake Discord (REST API v10 + gateway) on 127.0.0.1, for the real discord.py to talk to.

Owns: `FakeDiscord`: an aiohttp server on a random port that answers the REST routes
discord.py calls for a bot (login, application info, command sync, messages with files,
typing, reactions, threads, channels, interaction callbacks and webhook follow-ups), records
every request, and serves a gateway WebSocket (HELLO, IDENTIFY → READY + GUILD_CREATE,
heartbeats, RESUME with replay of what was missed, RECONNECT, zlib-stream compression when
the client asks for it). `dispatch(event, data)` pushes any gateway event; builders make
realistic MESSAGE_CREATE and INTERACTION_CREATE payloads. Answers can be scripted per route
(`fail_next`, `rate_limit_next`); `wait_for(predicate)` waits on a condition, never a sleep.

Wire traps it reproduces (discord.py checks them): JSON responses carry
`Content-Type: application/json` exactly (with a charset discord.py reads the body as text
and login fails); a 429 carries `Via` (without it discord.py assumes a Cloudflare ban),
`Retry-After`, `X-RateLimit-*` headers and `retry_after` in the body.

`point_discord_py_at(fake)` sets discord.py's process-global `Route.BASE` and
`DiscordWebSocket.DEFAULT_GATEWAY`, and gives back a function that restores them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import secrets
import socket
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_limits import (
    ChannelRateLimits,
    message_problems,
    rate_limited_body,
    too_large,
)
from tests.fakes.web_signin import DiscordOAuth

API_PREFIX = "/api/v10"
_MESSAGE_WRITE = re.compile(r"/channels/(\d+)/messages(?:/\d+)?")
_LINK = re.compile(r"(?<!<)https?://[^\s<>]+")
SUPPRESS_EMBEDS = 1 << 2
DISCORD_EPOCH_MS = 1_420_070_400_000
BOT_TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.fake.bot-token"
HEARTBEAT_INTERVAL_MS = 41_250
JSON_TYPE = "application/json"

# Gateway opcodes.
OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_RESUME = 6
OP_RECONNECT = 7
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11


@dataclass(slots=True)
class UploadedFile:
    field: str
    filename: str
    content_type: str
    data: bytes


@dataclass(slots=True)
class RecordedRequest:
    method: str
    path: str  # without the /api/v10 prefix
    query: dict[str, str]
    headers: dict[str, str]
    json: Any  # the JSON body, or a multipart's payload_json
    files: list[UploadedFile] = field(default_factory=list)
    received_at: float = field(default_factory=time.perf_counter)


@dataclass(slots=True)
class ScriptedReply:
    """Answer the next request matching `method` and the `path` pattern with this instead."""

    method: str
    path: re.Pattern[str]
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class GatewaySession:
    session_id: str
    intents: int | None
    sequence: int = 0
    # Every event sent in this session, for RESUME to replay what a client missed.
    events: list[dict[str, Any]] = field(default_factory=list)


class FakeDiscord:
    """Start with `await start()`; script with `fail_next`/`rate_limit_next`; push events
    with `dispatch` and the builders; inspect `requests`, `messages`, `identifies`."""

    def __init__(
        self,
        *,
        bot_id: int = 1_100_000_000_000_000_001,
        guild_ids: tuple[int, ...] = (1_200_000_000_000_000_001,),
        token: str = BOT_TOKEN,
    ) -> None:
        self.bot_id = str(bot_id)
        self.application_id = str(bot_id)  # a bot's application id is its user id
        self.token = token
        self.oauth = DiscordOAuth()  # Sign in with Discord (tests.fakes.web_signin)
        self.bot_user: dict[str, Any] = user_payload(bot_id, "teammate", bot=True)
        self.guilds: dict[str, dict[str, Any]] = {}
        self.members: dict[tuple[str, str], dict[str, Any]] = {}  # (guild, user) -> member
        self.bot_public = False  # GET /oauth2/applications/@me
        self.channels: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.commands: dict[str | None, list[dict[str, Any]]] = {}  # guild id (None: global)
        self.requests: list[RecordedRequest] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.connections = 0
        self.compressions: list[str | None] = []
        self.expired_tokens: set[str] = set()
        self.files: dict[str, tuple[str, bytes]] = {}  # attachment id: (content type, data)
        self.echo_own_messages = True
        # Discord previews links in a message's content as embeds of their own (type "link"),
        # beside any the sender set, unless the link is in <> or the message suppresses them.
        self.unfurl_links = False
        # Discord's per-channel limit on message writes (sends and edits shared); its 429s.
        self.rate_limits = ChannelRateLimits()
        self.rate_limited: list[RecordedRequest] = []
        self.url = ""
        self._ids = itertools.count(1)
        self._scripted: list[ScriptedReply] = []
        self._sessions: dict[str, GatewaySession] = {}
        self._interactions: dict[str, dict[str, Any]] = {}  # by token
        self._session: GatewaySession | None = None
        self._socket: web.WebSocketResponse | None = None
        self._compressor: Any = None
        self._send_lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        for index, guild_id in enumerate(guild_ids):
            self.add_guild(str(guild_id), name=f"guild {index}")

    # -- set-up ------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return self.url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/gateway"

    async def start(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/oauth2/authorize", self.oauth.authorize)
        app.router.add_post(API_PREFIX + "/oauth2/token", self._oauth_token)
        app.router.add_get("/attachments/{attachment_id}/{filename}", self._download)
        app.router.add_route("*", API_PREFIX + "/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def snowflake(self) -> str:
        """A fresh id whose timestamp is now, as Discord's are."""
        millis = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return str((millis << 22) | (next(self._ids) & 0x3FFFFF))

    def add_guild(self, guild_id: str | None = None, *, name: str = "guild") -> dict[str, Any]:
        guild_id = guild_id or self.snowflake()
        everyone = {
            "id": guild_id,
            "name": "@everyone",
            "permissions": "1071698660929",
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        guild: dict[str, Any] = {
            "id": guild_id,
            "name": name,
            "icon": None,
            "owner_id": "1",
            "roles": [everyone],
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": [],
            "threads": [],
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "member_count": 2,
            "large": False,
            "unavailable": False,
            "joined_at": "2026-01-01T00:00:00+00:00",
            "premium_tier": 0,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "system_channel_flags": 0,
            "preferred_locale": "en-US",
        }
        self.guilds[guild_id] = guild
        return guild

    def add_channel(
        self,
        guild_id: str,
        *,
        name: str = "general",
        channel_id: str | None = None,
        kind: int = 0,
    ) -> dict[str, Any]:
        """A channel of the guild: `kind` 0 text, 2 voice, 13 stage (their text chat takes
        messages, but no threads)."""
        channel = {
            "id": channel_id or self.snowflake(),
            "type": kind,
            "guild_id": guild_id,
            "name": name,
            "position": len(self.guilds[guild_id]["channels"]),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
        }
        self.guilds[guild_id]["channels"].append(channel)
        self.channels[channel["id"]] = channel
        return channel

    def add_role(
        self, guild_id: str, *, name: str, role_id: str | None = None, bot_id: str | None = None
    ) -> str:
        """A role; with `bot_id`, the managed role Discord gives that bot in the guild (the
        one its `@` autocomplete offers beside the bot itself)."""
        role_id = role_id or self.snowflake()
        role: dict[str, Any] = {
            "id": role_id,
            "name": name,
            "permissions": "0",
            "position": len(self.guilds[guild_id]["roles"]),
            "color": 0,
            "hoist": False,
            "managed": bot_id is not None,
            "mentionable": True,
            "flags": 0,
        }
        if bot_id is not None:
            role["tags"] = {"bot_id": bot_id}
        self.guilds[guild_id]["roles"].append(role)
        return role_id

    def dm_channel(self, user: dict[str, Any]) -> dict[str, Any]:
        channel = {"id": self.snowflake(), "type": 1, "recipients": [user], "last_message_id": None}
        self.channels[channel["id"]] = channel
        return channel

    # -- scripting ---------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        path: str,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next `method` request whose path (without /api/v10) fully matches the regular
        expression `path` gets this answer, once."""
        self._scripted.append(
            ScriptedReply(method.upper(), re.compile(path), status, body, dict(headers or {}))
        )

    def rate_limit_next(
        self, method: str, path: str, *, retry_after: float = 0.01, via: bool = True
    ) -> None:
        """A 429 as Discord sends it (`via=False`: as a Cloudflare ban looks to discord.py)."""
        headers = {
            "Retry-After": str(max(1, round(retry_after))),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
            "X-RateLimit-Reset-After": f"{retry_after:.3f}",
            "X-RateLimit-Bucket": "fake-bucket",
            "X-RateLimit-Scope": "user",
        }
        if via:
            headers["Via"] = "1.1 google"
        body = {
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": False,
        }
        self.fail_next(method, path, 429, body, headers)

    def expire_interaction(self, token: str) -> None:
        """From now on, webhooks on this interaction token answer as an expired token does."""
        self.expired_tokens.add(token)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
        """Return once `predicate()` (about what the fake received or sent) holds; it is checked
        after every request, gateway frame and event. The timeout only turns a hang into a
        failure naming the predicate."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)
            except TimeoutError:
                raise AssertionError(f"FakeDiscord: never true: {predicate!r}") from None

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- what was received -------------------------------------------------------------------

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        pattern = re.compile(path)
        return [r for r in self.requests if r.method == method and pattern.fullmatch(r.path)]

    def channel_messages(self, channel_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages.values() if m["channel_id"] == channel_id]

    # -- gateway -----------------------------------------------------------------------------

    async def dispatch(self, event: str, data: dict[str, Any]) -> int:
        """Send one event to the connected bot (or keep it for its RESUME); its sequence."""
        session = self._session
        if session is None:
            raise RuntimeError("FakeDiscord: no gateway session to dispatch to")
        session.sequence += 1
        frame = {"op": OP_DISPATCH, "t": event, "s": session.sequence, "d": data}
        session.events.append(frame)
        if self._socket is not None and not self._socket.closed:
            await self._send(self._socket, frame)
        await self._notify()
        return session.sequence

    async def disconnect(self, code: int = 4000) -> None:
        """Drop the connection as Discord does on trouble; the client should RESUME."""
        ws, self._socket = self._socket, None
        if ws is not None:
            await ws.close(code=code, message=b"fake disconnect")

    async def request_reconnect(self) -> None:
        """Op 7: ask the client to reconnect and resume."""
        if self._socket is not None:
            await self._send(self._socket, {"op": OP_RECONNECT, "d": None})

    @property
    def ready(self) -> bool:
        return self._session is not None and self._socket is not None

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        self._sockets.add(ws)
        compress = request.query.get("compress")
        self.compressions.append(compress)
        self.connections += 1
        compressor = zlib.compressobj() if compress == "zlib-stream" else None
        if compress not in (None, "zlib-stream") or request.query.get("encoding", "json") != "json":
            await ws.close(code=4012, message=b"unsupported compression or encoding")
            return ws
        self._socket, self._compressor = ws, compressor
        try:
            await self._send(
                ws, {"op": OP_HELLO, "d": {"heartbeat_interval": HEARTBEAT_INTERVAL_MS}}
            )
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    break
                await self._gateway_message(ws, json.loads(frame.data))
        finally:
            self._sockets.discard(ws)
            if self._socket is ws:
                self._socket = None
            await self._notify()
        return ws

    async def _gateway_message(self, ws: web.WebSocketResponse, message: dict[str, Any]) -> None:
        op, data = message.get("op"), message.get("d")
        if op == OP_HEARTBEAT:
            self.heartbeats += 1
            await self._send(ws, {"op": OP_HEARTBEAT_ACK})
        elif op == OP_IDENTIFY:
            self.identifies.append(data)
            if data.get("token") != self.token:
                await ws.close(code=4004, message=b"Authentication failed.")
                return
            session = GatewaySession(
                session_id=f"session-{self.snowflake()}", intents=data.get("intents")
            )
            self._sessions[session.session_id] = session
            self._session = session
            await self._ready(ws, session)
        elif op == OP_RESUME:
            self.resumes.append(data)
            session = self._sessions.get(data.get("session_id", ""))
            if session is None or data.get("token") != self.token:
                await self._send(ws, {"op": OP_INVALID_SESSION, "d": False})
                return
            self._session = session
            seen = data.get("seq") or 0
            for frame in session.events:
                if frame["s"] > seen:
                    await self._send(ws, frame)
            session.sequence += 1
            resumed = {"op": OP_DISPATCH, "t": "RESUMED", "s": session.sequence, "d": {}}
            session.events.append(resumed)
            await self._send(ws, resumed)
        await self._notify()

    async def _ready(self, ws: web.WebSocketResponse, session: GatewaySession) -> None:
        ready = {
            "v": 10,
            "user": self.bot_user,
            "guilds": [{"id": guild_id, "unavailable": True} for guild_id in self.guilds],
            "session_id": session.session_id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
            "relationships": [],
        }
        await self._dispatch_in(ws, session, "READY", ready)
        for guild in self.guilds.values():
            member = {
                "user": self.bot_user,
                "roles": [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
            await self._dispatch_in(ws, session, "GUILD_CREATE", {**guild, "members": [member]})

    async def _dispatch_in(
        self, ws: web.WebSocketResponse, session: GatewaySession, event: str, data: Any
    ) -> None:
        session.sequence += 1
        frame = {"op": OP_DISPATCH, "t": event, "s": session.sequence, "d": data}
        session.events.append(frame)
        await self._send(ws, frame)

    async def _send(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        text = json.dumps(frame)
        async with self._send_lock:
            if ws.closed:
                return
            if self._compressor is not None and ws is self._socket:
                data = self._compressor.compress(text.encode()) + self._compressor.flush(
                    zlib.Z_SYNC_FLUSH
                )
                await ws.send_bytes(data)
            else:
                await ws.send_str(text)

    async def _download(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["attachment_id"])
        if found is None:
            return web.Response(status=404)
        content_type, data = found
        return web.Response(body=data, headers={"Content-Type": content_type})

    def attachment(self, filename: str, content_type: str, data: bytes) -> dict[str, Any]:
        """A file a person attached (for `message_payload(attachments=[...])`), downloadable
        from the fake as from Discord's CDN."""
        attachment_id = self.snowflake()
        self.files[attachment_id] = (content_type, data)
        url = f"{self.url}/attachments/{attachment_id}/{filename}"
        return {
            "id": attachment_id,
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    # -- REST --------------------------------------------------------------------------------

    async def _oauth_token(self, request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/x-www-form-urlencoded":
            return _json({"error": "invalid_request"}, 400)  # Discord takes a form only
        form = {name: str(value) for name, value in (await request.post()).items()}
        body, status = self.oauth.token(form, request.headers)
        return _json(body, status)

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        body, files = await _read_body(request)
        recorded = RecordedRequest(
            method=request.method,
            path=path,
            query=dict(request.query),
            headers={name.lower(): value for name, value in request.headers.items()},
            json=body,
            files=files,
        )
        self.requests.append(recorded)
        try:
            return await self._answer(recorded)
        finally:
            await self._notify()

    async def _answer(self, r: RecordedRequest) -> web.StreamResponse:
        for index, scripted in enumerate(self._scripted):
            if scripted.method == r.method and scripted.path.fullmatch(r.path):
                del self._scripted[index]
                return _json(scripted.body, scripted.status, scripted.headers)
        webhook = re.fullmatch(r"/(webhooks|interactions)/(\d+)/([^/]+)(/.*)?", r.path)
        if webhook is not None and webhook.group(3) in self.expired_tokens:
            return _json({"message": "Invalid Webhook Token", "code": 50027}, 401)
        if r.path.startswith("/webhooks/") or r.path.startswith("/interactions/"):
            return await self._interaction_route(r, webhook)
        signed_in = self.oauth.rest(r.method, r.path, r.headers)  # a person's Bearer token
        if signed_in is not None and not r.headers.get("authorization", "").startswith("Bot "):
            return _json(*signed_in)
        if r.headers.get("authorization") != f"Bot {self.token}":
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        write = _MESSAGE_WRITE.fullmatch(r.path)
        if write is not None and r.method in ("POST", "PATCH"):
            return await self._limited_write(r, write.group(1))
        return await self._route(r)

    async def _route(self, r: RecordedRequest) -> web.StreamResponse:
        for method, pattern, handler in self._routes():
            match = re.fullmatch(pattern, r.path)
            if match is not None and method == r.method:
                return await handler(r, *match.groups())
        return _json({"message": "404: Not Found", "code": 0}, 404)

    async def _limited_write(self, r: RecordedRequest, channel_id: str) -> web.StreamResponse:
        """A message sent or edited with the bot token, within Discord's limits: the
        channel's rate limit (a 429 past it), then what a message may hold (a 400, a 413)."""
        verdict = self.rate_limits.take(channel_id, "send" if r.method == "POST" else "edit")
        if not verdict.allowed:
            self.rate_limited.append(r)
            return _json(rate_limited_body(verdict.retry_after), 429, verdict.headers)
        sizes = [len(upload.data) for upload in r.files]
        if too_large(sizes):
            return _json({"message": "Request entity too large", "code": 40005}, 413)
        problems = message_problems(r.json, sizes)
        if problems is not None:
            return _json(problems, 400)
        response = await self._route(r)
        response.headers.update(verdict.headers)
        return response

    def _routes(self) -> list[tuple[str, str, Callable[..., Any]]]:
        return [
            ("GET", r"/gateway", self._get_gateway),
            ("GET", r"/gateway/bot", self._get_gateway),
            ("GET", r"/users/@me", self._get_me),
            ("GET", r"/oauth2/applications/@me", self._get_application),
            ("GET", r"/applications/@me", self._get_application),
            ("PUT", r"/applications/(\d+)/commands", self._put_commands),
            ("GET", r"/applications/(\d+)/commands", self._get_commands),
            ("PUT", r"/applications/(\d+)/guilds/(\d+)/commands", self._put_commands),
            ("GET", r"/applications/(\d+)/guilds/(\d+)/commands", self._get_commands),
            ("GET", r"/channels/(\d+)", self._get_channel),
            ("POST", r"/channels/(\d+)/typing", self._no_content),
            ("POST", r"/channels/(\d+)/messages", self._post_message),
            ("GET", r"/channels/(\d+)/messages", self._get_messages),
            ("GET", r"/channels/(\d+)/messages/(\d+)", self._get_message),
            ("PATCH", r"/channels/(\d+)/messages/(\d+)", self._patch_message),
            ("DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message),
            ("PUT", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._no_content),
            ("DELETE", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._no_content),
            ("POST", r"/channels/(\d+)/messages/(\d+)/threads", self._thread_from_message),
            ("POST", r"/channels/(\d+)/threads", self._thread_without_message),
            ("POST", r"/users/@me/channels", self._open_dm),
            ("GET", r"/guilds/(\d+)/members/(\d+)", self._get_member),
        ]

    def add_member(self, guild_id: str, user: dict[str, Any], roles: list[str]) -> None:
        """`user` is a member of the guild with these role ids (`GET .../members/{id}`)."""
        self.members[(guild_id, str(user["id"]))] = {
            "user": user,
            "roles": roles,
            "joined_at": "2026-01-01T00:00:00+00:00",
            "deaf": False,
            "mute": False,
            "flags": 0,
        }

    async def _get_member(self, r: RecordedRequest, guild_id: str, user_id: str) -> web.Response:
        member = self.members.get((guild_id, user_id))
        if member is None:
            return _json({"message": "Unknown Member", "code": 10007}, 404)
        return _json(member)

    async def _get_gateway(self, r: RecordedRequest) -> web.Response:
        return _json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _get_me(self, r: RecordedRequest) -> web.Response:
        return _json(self.bot_user)

    async def _get_application(self, r: RecordedRequest) -> web.Response:
        return _json(
            {
                "id": self.application_id,
                "name": "Teammate",
                "icon": None,
                "description": "",
                "bot_public": self.bot_public,
                "bot_require_code_grant": False,
                "owner": user_payload(1, "owner"),
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
                "summary": "",
                "rpc_origins": [],
            }
        )

    async def _put_commands(
        self, r: RecordedRequest, app_id: str, guild_id: str | None = None
    ) -> web.Response:
        if app_id != self.application_id:
            return _json({"message": "Unknown Application", "code": 10002}, 404)
        commands = []
        for command in r.json or []:
            commands.append(
                {
                    "type": 1,
                    "default_member_permissions": None,
                    "nsfw": False,
                    **command,
                    "id": self.snowflake(),
                    "application_id": self.application_id,
                    "version": self.snowflake(),
                    **({"guild_id": guild_id} if guild_id is not None else {}),
                }
            )
        self.commands[guild_id] = commands
        return _json(commands)

    async def _get_commands(
        self, r: RecordedRequest, app_id: str, guild_id: str | None = None
    ) -> web.Response:
        return _json(self.commands.get(guild_id, []))

    async def _get_channel(self, r: RecordedRequest, channel_id: str) -> web.Response:
        channel = self.channels.get(channel_id)
        if channel is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        return _json(channel)

    async def _no_content(self, r: RecordedRequest, *ids: str) -> web.Response:
        return web.Response(status=204)

    async def _post_message(self, r: RecordedRequest, channel_id: str) -> web.Response:
        if channel_id not in self.channels:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        message = self._new_message(channel_id, r)
        await self._echo(message)
        return _json(message)

    async def _echo(self, message: dict[str, Any]) -> None:
        """Discord tells a bot about its own messages too (MESSAGE_CREATE): loop protection
        must hold against that."""
        if self.echo_own_messages and self._session is not None:
            await self.dispatch("MESSAGE_CREATE", message)

    async def _get_messages(self, r: RecordedRequest, channel_id: str) -> web.Response:
        """A page of the channel's messages, newest first, as Discord answers: `limit` (1 to
        100) of them, the newest before `before`, or the oldest after `after` (a reader from
        the wrong end of a long channel misses what it looks for, as on Discord)."""
        limit = int(r.query.get("limit", "50"))
        if not 1 <= limit <= 100:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        before, after = r.query.get("before"), r.query.get("after")
        ordered = sorted(self.channel_messages(channel_id), key=lambda m: int(m["id"]))
        if after is not None:
            page = [m for m in ordered if int(m["id"]) > int(after)][:limit]
        else:
            page = [m for m in ordered if before is None or int(m["id"]) < int(before)][-limit:]
        return _json(list(reversed(page)))

    async def _get_message(self, r: RecordedRequest, channel_id: str, message_id: str) -> Any:
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        return _json(message)

    async def _patch_message(self, r: RecordedRequest, channel_id: str, message_id: str) -> Any:
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        return _json(self._edit(message, r))

    async def _delete_message(self, r: RecordedRequest, channel_id: str, message_id: str) -> Any:
        if self.messages.pop(message_id, None) is None:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        return web.Response(status=204)

    async def _thread_from_message(
        self, r: RecordedRequest, channel_id: str, message_id: str
    ) -> web.Response:
        parent = self.channels.get(channel_id)
        if parent is None or message_id not in self.messages:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        if any(c.get("id") == message_id for c in self.channels.values()):
            return _json({"message": "A thread has already been created", "code": 160004}, 400)
        if parent.get("type") not in (0, 5):  # only text and announcement channels have threads
            return _json(
                {"message": "Cannot execute action on this channel type", "code": 50024}, 400
            )
        # A thread started from a message has the message's id.
        thread = await self._new_thread(parent, message_id, r.json or {}, 11)
        self.messages[message_id]["thread"] = thread
        return _json(thread, 201)

    async def _thread_without_message(self, r: RecordedRequest, channel_id: str) -> web.Response:
        parent = self.channels.get(channel_id)
        if parent is None:
            return _json({"message": "Unknown Channel", "code": 10003}, 404)
        body = r.json or {}
        return _json(await self._new_thread(parent, self.snowflake(), body, body.get("type", 11)))

    async def _open_dm(self, r: RecordedRequest) -> web.Response:
        recipient = (r.json or {}).get("recipient_id", "0")
        return _json(self.dm_channel(user_payload(int(recipient), "someone")))

    async def _new_thread(
        self, parent: dict[str, Any], thread_id: str, body: dict[str, Any], kind: int
    ) -> dict[str, Any]:
        thread = {
            "id": thread_id,
            "type": kind,
            "guild_id": parent["guild_id"],
            "parent_id": parent["id"],
            "owner_id": self.bot_id,
            "name": str(body.get("name", "thread"))[:100],
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": body.get("auto_archive_duration", 1440),
                "archive_timestamp": "2026-12-01T00:00:00+00:00",
                "locked": False,
            },
        }
        self.channels[thread_id] = thread
        self.guilds[parent["guild_id"]]["threads"].append(thread)
        if self._session is not None:
            await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread

    # -- interactions ------------------------------------------------------------------------

    async def _interaction_route(
        self, r: RecordedRequest, webhook: re.Match[str] | None
    ) -> web.StreamResponse:
        if webhook is None:
            return _json({"message": "404: Not Found", "code": 0}, 404)
        kind, owner_id, token, rest = webhook.groups()
        interaction = self._interactions.get(token)
        if interaction is None:
            return _json({"message": "Unknown interaction", "code": 10062}, 404)
        body = r.json or {}
        if kind == "interactions":
            return await self._callback(r, interaction, body)
        if owner_id != self.application_id:
            return _json({"message": "Unknown Webhook", "code": 10015}, 404)
        problems = message_problems(body, [len(upload.data) for upload in r.files])
        if problems is not None and r.method in ("POST", "PATCH"):
            return _json(problems, 400)
        original = interaction.get("original_id")
        if rest in (None, "") and r.method == "POST":
            message = self._new_message(interaction["channel_id"], r, interaction=True)
            await self._echo(message)
            return _json(message)
        target = re.fullmatch(r"/messages/(@original|\d+)", rest or "")
        if target is None:
            return _json({"message": "404: Not Found", "code": 0}, 404)
        message_id = original if target.group(1) == "@original" else target.group(1)
        message = self.messages.get(message_id or "")
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        if r.method == "GET":
            return _json(message)
        if r.method == "PATCH":
            return _json(self._edit(message, r))
        if r.method == "DELETE":
            del self.messages[message["id"]]
            return web.Response(status=204)
        return _json({"message": "405: Method Not Allowed", "code": 0}, 405)

    async def _callback(
        self, r: RecordedRequest, interaction: dict[str, Any], body: dict[str, Any]
    ) -> web.Response:
        if interaction.get("responded"):
            return _json(
                {"message": "Interaction has already been acknowledged.", "code": 40060}, 400
            )
        interaction["responded"] = True
        kind = body.get("type")
        data = body.get("data") or {}
        response: dict[str, Any] = {
            "interaction": {"id": interaction["id"], "type": interaction["type"]}
        }
        if kind in (4, 5):  # a message, or "thinking..." to be edited later
            message = self._new_message(
                interaction["channel_id"],
                r,
                interaction=True,
                payload=data if kind == 4 else {"content": "", "flags": data.get("flags", 0) | 128},
            )
            interaction["original_id"] = message["id"]
            response["interaction"]["response_message_id"] = message["id"]
            response["interaction"]["response_message_loading"] = kind == 5
            response["interaction"]["response_message_ephemeral"] = bool(data.get("flags", 0) & 64)
            response["resource"] = {"type": kind, "message": message}
        elif kind in (6, 7):  # deferred update, or edit the message the button is on
            response["resource"] = {"type": kind}
            if kind == 7 and interaction.get("message"):
                target = self.messages.get(interaction["message"]["id"])
                if target is not None:
                    response["resource"]["message"] = self._edit(target, r)
        return _json(response)

    # -- messages ----------------------------------------------------------------------------

    def _new_message(
        self,
        channel_id: str,
        r: RecordedRequest,
        *,
        interaction: bool = False,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body = payload if payload is not None else (r.json or {})
        channel = self.channels.get(channel_id, {})
        message: dict[str, Any] = {
            "id": self.snowflake(),
            "type": 20 if interaction else 0,
            "channel_id": channel_id,
            "author": self.bot_user,
            "content": body.get("content") or "",
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": self._attachments(r.files, body),
            "embeds": body.get("embeds") or [],
            "components": body.get("components") or [],
            "pinned": False,
            "flags": body.get("flags") or 0,
        }
        if "guild_id" in channel:
            message["guild_id"] = channel["guild_id"]
        if interaction:  # an interaction's messages are its application's webhook's
            message["webhook_id"] = self.application_id
        reference = body.get("message_reference")
        if reference:
            message["message_reference"] = reference
        self.messages[message["id"]] = message
        self._unfurl(message)
        return message

    def _edit(self, message: dict[str, Any], r: RecordedRequest) -> dict[str, Any]:
        body = r.json or {}
        for key in ("content", "embeds", "components", "flags"):
            if key in body:
                message[key] = body[key] if body[key] is not None else _EMPTY[key]
        if r.files or "attachments" in body:
            kept = {str(a.get("id")) for a in body.get("attachments") or []}
            message["attachments"] = [
                a for a in message["attachments"] if a["id"] in kept
            ] + self._attachments(r.files, body)
        message["edited_timestamp"] = _now_iso()
        self._unfurl(message)
        return message

    def _unfurl(self, message: dict[str, Any]) -> None:
        """With `unfurl_links`: the message's link previews follow its content (up to five)."""
        if not self.unfurl_links:
            return
        embeds = [e for e in message["embeds"] if e.get("type", "rich") == "rich"]
        if not message["flags"] & SUPPRESS_EMBEDS:
            links = _LINK.findall(message["content"])[:5]
            embeds += [{"type": "link", "url": url, "title": url} for url in links]
        message["embeds"] = embeds

    def _attachments(self, files: list[UploadedFile], body: dict[str, Any]) -> list[dict[str, Any]]:
        described = {str(a.get("id")): a for a in body.get("attachments") or []}
        found = []
        for index, upload in enumerate(files):
            attachment_id = self.snowflake()
            about = described.get(str(index), {})
            found.append(
                {
                    "id": attachment_id,
                    "filename": about.get("filename", upload.filename),
                    "size": len(upload.data),
                    "url": f"{self.url}/attachments/{attachment_id}/{upload.filename}",
                    "proxy_url": f"{self.url}/attachments/{attachment_id}/{upload.filename}",
                    "content_type": upload.content_type,
                    "data": upload.data.decode("latin-1"),  # for tests to read back
                }
            )
        return found

    # -- builders for events -----------------------------------------------------------------

    def message_payload(
        self,
        channel_id: str,
        content: str,
        *,
        author: dict[str, Any] | None = None,
        mention_bot: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        """A person's MESSAGE_CREATE payload in a channel, thread or DM (stored, so threads
        can be started from it and history read back)."""
        author = author or user_payload(1_400_000_000_000_000_001, "ada", global_name="Ada")
        channel = self.channels[channel_id]
        if mention_bot:
            content = f"<@{self.bot_id}> {content}"
        message: dict[str, Any] = {
            "id": self.snowflake(),
            "type": 0,
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self.bot_user] if mention_bot else [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "flags": 0,
        }
        if "guild_id" in channel:
            message["guild_id"] = channel["guild_id"]
            message["member"] = {
                "roles": extra.pop("roles", []),
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "nick": None,
            }
        message.update(extra)
        self.messages[message["id"]] = message
        return message

    def interaction_payload(
        self,
        kind: int,
        data: dict[str, Any],
        *,
        channel_id: str,
        user: dict[str, Any] | None = None,
        roles: list[str] | None = None,
        message: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload; the fake remembers its token for the callback."""
        user = user or user_payload(1_400_000_000_000_000_001, "ada", global_name="Ada")
        channel = self.channels[channel_id]
        interaction_id = self.snowflake()
        payload: dict[str, Any] = {
            "id": interaction_id,
            "application_id": self.application_id,
            "type": kind,
            "data": data,
            "channel_id": channel_id,
            "channel": {k: v for k, v in channel.items() if k != "recipients"},
            # Real tokens are long base64url-ish strings; discord.py's webhook URLs expect that.
            "token": "aW50ZXJhY3Rpb24." + secrets.token_urlsafe(120),
            "version": 1,
            "locale": "en-US",
            "app_permissions": "2248473465835073",
            "entitlements": [],
            "authorizing_integration_owners": {"0": channel.get("guild_id", user["id"])},
            "context": 0 if "guild_id" in channel else 1,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if "guild_id" in channel:
            payload["guild_id"] = channel["guild_id"]
            payload["guild_locale"] = "en-US"
            payload["member"] = {
                "user": user,
                "roles": roles or [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
                "nick": None,
                "permissions": "2248473465835073",
            }
        else:
            payload["user"] = user
        if message is not None:
            payload["message"] = message
        self._interactions[payload["token"]] = {
            "id": interaction_id,
            "type": kind,
            "channel_id": channel_id,
            "message": message,
        }
        return payload

    def slash_command(
        self,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        channel_id: str,
        subcommand: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A CHAT_INPUT command as Discord sends it (string, integer, boolean options)."""
        commands = self.commands.get(self.channels[channel_id].get("guild_id"), []) or (
            self.commands.get(None, [])
        )
        known = next((c for c in commands if c["name"] == name), None)
        option_list = [
            {"name": key, "type": _option_type(value), "value": value}
            for key, value in (options or {}).items()
        ]
        if subcommand is not None:
            option_list = [{"name": subcommand, "type": 1, "options": option_list}]
        data: dict[str, Any] = {
            "id": known["id"] if known else self.snowflake(),
            "name": name,
            "type": 1,
            "options": option_list,
        }
        if known is not None and "guild_id" in known:
            data["guild_id"] = known["guild_id"]
        return self.interaction_payload(2, data, channel_id=channel_id, **kwargs)

    def button_press(self, custom_id: str, message: dict[str, Any], **kwargs: Any) -> Any:
        data = {"custom_id": custom_id, "component_type": 2}
        return self.interaction_payload(
            3, data, channel_id=message["channel_id"], message=message, **kwargs
        )


_EMPTY: dict[str, Any] = {"content": "", "embeds": [], "components": [], "flags": 0}


def user_payload(
    user_id: int, username: str, *, global_name: str | None = None, bot: bool = False
) -> dict[str, Any]:
    user: dict[str, Any] = {
        "id": str(user_id),
        "username": username,
        "global_name": global_name,
        "discriminator": "0",
        "avatar": None,
        "public_flags": 0,
    }
    if bot:
        user["bot"] = True
    return user


def _option_type(value: Any) -> int:
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return 4
    if isinstance(value, float):
        return 10
    return 3


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly `application/json`: with a charset, discord.py reads the body as text.
    response = web.Response(
        status=status, body=json.dumps(body).encode(), headers=dict(headers or {})
    )
    response.headers["Content-Type"] = JSON_TYPE
    return response


async def _read_body(request: web.Request) -> tuple[Any, list[UploadedFile]]:
    if not request.body_exists:
        return None, []
    if request.content_type == "multipart/form-data":
        payload: Any = None
        files: list[UploadedFile] = []
        reader = await request.multipart()
        async for part in reader:
            if not hasattr(part, "read"):
                continue
            data = await part.read(decode=False)  # type: ignore[union-attr]
            name = part.name or ""
            if name == "payload_json":
                payload = json.loads(data)
            else:
                files.append(
                    UploadedFile(
                        field=name,
                        filename=part.filename or name,  # type: ignore[union-attr]
                        content_type=part.headers.get("Content-Type", "application/octet-stream"),
                        data=bytes(data),
                    )
                )
        return payload, files
    raw = await request.read()
    if not raw:
        return None, []
    with contextlib.suppress(ValueError):
        return json.loads(raw), []
    return raw.decode("utf-8", "replace"), []


def point_discord_py_at(fake: FakeDiscord) -> Callable[[], None]:
    """Aim discord.py (process-global) at `fake`; returns the function that restores it."""
    import discord.gateway
    import discord.http
    import yarl

    saved_base = discord.http.Route.BASE
    saved_gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = fake.api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)

    def restore() -> None:
        discord.http.Route.BASE = saved_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = saved_gateway

    return restore
