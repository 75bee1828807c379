"""The Slack app: bolt's `AsyncApp` over the runner, in Socket Mode or HTTP mode.

Owns: `SlackBot`: the Web API client (`SLACK_API_URL`, default Slack's), the bolt app with its
listeners (`bots.platforms.slack.listeners`), who Teammate is (`auth.test` at start), the two ways
in (Socket Mode: `SLACK_APP_TOKEN`, following whatever URL `apps.connections.open` returns; HTTP
mode: signed requests on `/slack/events`), the tasks that do each event's work after its
acknowledgement, and a graceful shutdown.

The acknowledgement comes first: every listener only writes a message event to the journal
(`bots.journal`: an acknowledged event survives a crash before it reached the store)
and schedules its work in a task tracked here (bolt runs with `process_before_response=True`,
so the ack is sent the moment the listener returns, with no polling). In HTTP mode that
work starts once no request has been handled for 10 ms (`HttpGate.ack_first`, 1 s at most): a
burst's acknowledgements do not wait for the work of its first events. Before taking events,
`connect_socket_mode` and `listen_http` replay what a crashed process acknowledged and never
handed to the runner. Shutdown stops taking events (a request arriving while
closing gets a 503, so Slack delivers it again later), lets the scheduled work reach the
runner, gives running answers `grace_s` to finish, and leaves the rest to `runner.close()`
(they are then marked stopped and their messages kept for the next start).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal

import aiohttp

from bots.features.scheduler import SCHEDULED_BY, StartedThread
from bots.journal import EventJournal
from bots.platforms.slack.events import SlackMessage
from bots.platforms.slack.files import FileFetcher
from bots.platforms.slack.http_gate import MAX_BODY_BYTES, HttpGate
from bots.platforms.slack.listeners import SlackIdentity, SlackListeners
from bots.platforms.slack.surface import SlackFeatures, SlackSurface, SlackSurfaces, SurfaceOptions
from bots.platforms.slack.users import UserNames
from bots.runner import ConversationRunner
from bots.settings import Settings, SettingsError

log = logging.getLogger(__name__)

SLACK_API_URL = "https://slack.com/api/"
EVENTS_PATH = "/slack/events"
MAX_PENDING_EVENTS = 10_000  # scheduled but not yet handed to the runner
WEB_API_TIMEOUT_S = 30.0
JOURNAL_DIR = "slack-events"  # in the data directory

SLACK_RULES = """\
You are talking in Slack, in a thread of a channel or in a direct message. Your reply is \
rendered as standard Markdown: use short paragraphs, lists, **bold**, `code` and fenced code \
blocks, and links; prefer lists to wide tables, which read badly on phones. People are named \
in messages as @Name; write a person's name rather than pinging them unless they must act. \
Keep answers focused: people read you in a chat thread."""


class SlackStartError(Exception):
    """Slack refused to start (a bad token, a missing setting): one line, no secret in it."""


class SlackBot:
    """Teammate in one Slack workspace. See the module docstring and `run`."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any | None = None,
        commands: Callable[[Any, SlackBot], None] | None = None,
    ) -> None:
        from slack_bolt.async_app import AsyncApp
        from slack_sdk.web.async_client import AsyncWebClient

        self.settings = settings
        self._token = settings.require("slack_bot_token")
        self.api_url = _with_slash(settings.slack_api_url or SLACK_API_URL)
        # No SDK retries: after a transport error a post may have happened, so the surface
        # decides what to retry (a 429 is retried there, after its Retry-After).
        self.client: Any = client or AsyncWebClient(
            token=self._token, base_url=self.api_url, retry_handlers=[]
        )
        signing = settings.slack_signing_secret
        self.bolt: Any = AsyncApp(
            client=self.client,
            # Socket Mode needs none; HTTP mode checks it is set (`listen_http`).
            signing_secret=signing.get_secret_value() if signing is not None else "",
            process_before_response=True,
            # bolt's say/set_status helpers are not used (the surface talks to Slack): not
            # building them keeps every acknowledgement a little cheaper.
            attaching_conversation_kwargs_enabled=False,
            logger=logging.getLogger("slack_bolt"),
        )
        self.bolt.middleware(self._refuse_while_closing)
        self.surfaces = AppSurfaces(
            self.client, SurfaceOptions(usage_footer=settings.slack.usage_footer)
        )
        self.names = UserNames(self.client)
        self.fetcher = FileFetcher(self._token, api_url=self.api_url)
        self.identity: SlackIdentity | None = None
        self._commands = commands
        self.journal = EventJournal(settings.data_dir / JOURNAL_DIR)
        self._listeners: SlackListeners | None = None
        self._replayed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._socket: Any | None = None
        self._http: Any | None = None  # aiohttp AppRunner
        self.gate: HttpGate | None = None  # HTTP mode's front door, once listening
        self._runner: ConversationRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, runner: ConversationRunner) -> SlackIdentity:
        """Learn who Teammate is (`auth.test`) and register the listeners. Raises
        `SlackStartError` if the token is refused. The caller then runs `runner.recover()`
        once every platform has started, and connects (`connect_socket_mode` or
        `listen_http`)."""
        if getattr(self.client, "session", None) is None:
            # One connection pool for every Web API call (the SDK would otherwise open, and
            # for Slack handshake TLS, a new connection per call).
            self.client.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=WEB_API_TIMEOUT_S)
            )
        from slack_sdk.errors import SlackApiError

        try:
            response = await self.client.auth_test()
        except SlackApiError as exc:
            raise SlackStartError(
                f"Slack refused SLACK_BOT_TOKEN (auth.test: {_error_name(exc)})"
            ) from None
        except Exception as exc:
            raise SlackStartError(
                f"could not reach Slack at {self.api_url} ({type(exc).__name__})"
            ) from None
        user_id, team_id = response.get("user_id"), response.get("team_id")
        if not isinstance(user_id, str) or not isinstance(team_id, str):
            raise SlackStartError("auth.test did not say who the bot is (is it a bot token?)")
        bot_id = response.get("bot_id")
        name = response.get("user")
        identity = SlackIdentity(
            user_id=user_id,
            bot_id=bot_id if isinstance(bot_id, str) else None,
            team_id=team_id,
            name=name if isinstance(name, str) and name else "Teammate",
        )
        self.identity = identity
        self._runner = runner
        self.names.remember(identity.user_id, identity.name)
        listeners = SlackListeners(
            runner=runner,
            settings=self.settings,
            client=self.client,
            identity=identity,
            names=self.names,
            fetcher=self.fetcher,
            surfaces=self.surfaces,
            spawn=self.spawn,
            journal=self.journal,
        )
        listeners.register(self.bolt)
        self._listeners = listeners
        if self._commands is not None:
            self._commands(self.bolt, self)
        log.info("Slack: signed in as %s (%s) in %s", identity.name, user_id, team_id)
        return identity

    async def connect_socket_mode(self) -> None:
        """Connect through Socket Mode (`SLACK_APP_TOKEN`); returns once connected."""
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        app_token = self.settings.require("slack_app_token")
        await self.replay_journal()
        handler: Any = AsyncSocketModeHandler(self.bolt, app_token, web_client=self.client)
        self._socket = handler
        try:
            await handler.connect_async()
        except Exception as exc:
            raise SlackStartError(f"Socket Mode did not connect: {_error_name(exc)}") from None

    async def mount_http(self, mount: Callable[[str, Any], None]) -> None:
        """HTTP mode on the process's one server: the same gate at `/slack/events`, added
        with `mount(path, handler)` (before that server starts)."""
        secret = self._signing_secret()
        await self.replay_journal()
        self.gate = HttpGate(secret, self.bolt.async_dispatch)
        mount(EVENTS_PATH, self.gate.handle)
        log.info("Slack: %s on the process's HTTP server", EVENTS_PATH)

    def _signing_secret(self) -> str:
        secret = self.settings.slack_signing_secret
        if secret is None or not secret.get_secret_value():
            raise SettingsError("SLACK_SIGNING_SECRET is not set (needed for HTTP mode)")
        return secret.get_secret_value()

    async def listen_http(self, host: str = "0.0.0.0", port: int = 3000) -> int:
        """Serve the Events API and interactivity at `/slack/events` (signed requests only);
        returns the bound port (`port=0` picks a free one)."""
        from aiohttp import web

        secret = self._signing_secret()
        await self.replay_journal()
        # Capped, verified on the raw bytes and parsed off the loop when large, before bolt
        # (which would parse first): bots.platforms.slack.http_gate.
        self.gate = HttpGate(secret, self.bolt.async_dispatch)
        web_app = web.Application(client_max_size=MAX_BODY_BYTES)
        web_app.router.add_post(EVENTS_PATH, self.gate.handle)
        runner = web.AppRunner(web_app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._http = runner
        sockets = getattr(site._server, "sockets", None) or []
        bound: int = sockets[0].getsockname()[1] if sockets else port
        log.info("Slack: serving %s on %s:%s", EVENTS_PATH, host, bound)
        return bound

    async def run(
        self,
        runner: ConversationRunner,
        *,
        mode: Literal["socket", "http"] = "socket",
        host: str = "0.0.0.0",
        port: int = 3000,
        stop: asyncio.Event,
        grace_s: float = 10.0,
        recover: bool = True,
        ready: Callable[[int | None], Awaitable[None] | None] | None = None,
    ) -> None:
        """Start, recover (unless another platform's start does it), connect, run until
        `stop` is set, then shut down gracefully. `ready(port)` is called once connected
        (the bound port in HTTP mode, None in Socket Mode)."""
        await self.start(runner)
        try:
            if recover:
                await runner.recover()
            bound: int | None = None
            if mode == "socket":
                await self.connect_socket_mode()
            else:
                bound = await self.listen_http(host, port)
            if ready is not None:
                maybe = ready(bound)
                if maybe is not None:
                    await maybe
            await stop.wait()
        finally:
            await self.shutdown(grace_s=grace_s)

    async def replay_journal(self) -> None:
        """Hand the runner the events a crashed process acknowledged and never handed over
        (once per process, before taking new events: they are older)."""
        if self._listeners is None or self._replayed:
            return
        self._replayed = True
        for replay in await self.journal.adopt_orphans():
            self._listeners.replay(replay)

    async def shutdown(self, *, grace_s: float = 10.0) -> None:
        """Stop taking events, hand what was acknowledged to the runner, give running answers
        up to `grace_s` to finish, and close connections. Safe to call twice."""
        self._closing = True
        if self._socket is not None:
            socket, self._socket = self._socket, None
            try:
                await socket.close_async()
            except Exception:
                log.exception("closing the Socket Mode connection failed")
        if self._http is not None:
            http, self._http = self._http, None
            await http.cleanup()
        await self.drain(timeout_s=grace_s)
        await self.journal.close()  # what is not done yet is replayed at the next start
        if self._runner is not None and grace_s > 0:
            try:
                await asyncio.wait_for(self._runner.wait_all(), grace_s)
            except TimeoutError:
                log.info("answers still running after %.0f s; they will be stopped", grace_s)
        await self.fetcher.aclose()
        session = getattr(self.client, "session", None)
        if session is not None and not session.closed:
            await session.close()

    # -- the work after each acknowledgement ------------------------------------------------

    @property
    def pending_events(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run an event's work after its acknowledgement, tracked until it is done."""
        if len(self._tasks) >= MAX_PENDING_EVENTS:
            work.close()
            log.error("too many Slack events in progress; %s dropped", name)
            return
        task = asyncio.create_task(self._guarded(work, name, self.gate), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, *, timeout_s: float | None = None) -> None:
        """Wait until every scheduled event's work is done (tests; shutdown)."""
        while self._tasks:
            done, _pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            if not done:
                log.warning("%d Slack events still in progress at shutdown", len(self._tasks))
                return

    async def _guarded(
        self, work: Coroutine[Any, Any, None], name: str, gate: HttpGate | None = None
    ) -> None:
        if gate is not None:  # acknowledgements first: the burst's acks, then its work
            try:
                await gate.ack_first.quiet()
            except BaseException:  # cancelled while held (a shutdown): never started
                work.close()
                raise
        try:
            await work
        except Exception:
            log.exception("handling %s failed", name)

    async def _refuse_while_closing(self, next: Callable[[], Awaitable[Any]]) -> Any:
        if self._closing:
            from slack_bolt.response import BoltResponse

            # Not acknowledged: Slack delivers it again, to the next process.
            return BoltResponse(status=503, body="shutting down")
        return await next()


class AppSurfaces:
    """The app's surfaces: one per message (`for_message`), or for an earlier run's ref after
    a restart (`for_ref`: the runner's `SurfaceFactory`). What the workspace supports is
    learnt once and shared (assistant threads apart: they have the status line where channels
    may not)."""

    def __init__(self, client: Any, options: SurfaceOptions) -> None:
        self._client = client
        self._options = options
        self._recovered = SlackSurfaces(client, options=options)
        self._channels = SlackFeatures(streaming=True, status_line=True)
        self._assistant = SlackFeatures(streaming=True, status_line=True)

    def for_message(self, message: SlackMessage, *, assistant_thread: bool) -> SlackSurface:
        return SlackSurface(
            self._client,
            team_id=message.team_id,
            channel=message.channel_id,
            thread_ts=message.thread_ts,
            message_ts=message.ts,
            user_id=message.user_id,
            features=self._assistant if assistant_thread else self._channels,
            options=self._options,
        )

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> SlackSurface | None:
        return self._recovered.for_ref(conversation_key, ref)

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        """Scheduled work (`bots.features.scheduler.ThreadStarter`): a new top-level message in the
        channel, attributed to `for_user`; the run is shown in its thread."""
        _platform, team_id, channel = channel_key.split(":", 2)
        # Escaped, so a prompt cannot mention @channel or anyone else.
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        head = SCHEDULED_BY.format(mention=f"<@{for_user}>", text=escaped)
        posted = await self._client.chat_postMessage(
            channel=channel, text=head, unfurl_links=False, unfurl_media=False
        )
        ts = str(posted["ts"])
        surface = SlackSurface(
            self._client,
            team_id=team_id,
            channel=channel,
            thread_ts=ts,
            message_ts=ts,
            user_id=for_user,
            features=self._channels,
            options=self._options,
        )
        return StartedThread(f"slack:{team_id}:{channel}:{ts}", surface)


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _error_name(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    return str(error) if error else type(exc).__name__
