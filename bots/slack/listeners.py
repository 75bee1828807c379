"""What Teammate does with each Slack event, button click and assistant-thread event.

Owns: `SlackListeners`: registering bolt listeners (`app_mention`, `message`, the Stop and
feedback buttons, bolt's `AsyncAssistant` for AI-app threads), and the work behind each, which
runs after the acknowledgement in a task the app tracks: translate the payload
(`bots.slack.events`), check the allow-lists and DMs, stop on `@teammate stop`, otherwise look
up the author's name, download the files, read the thread so far when Teammate is new to it,
and hand the message to the runner with its surface.

De-duplication (docs/architecture.md, "The runner"): the message's channel+ts id and Slack's
event id are claimed in the store's one accepting transaction (`Incoming.also_claim`), so a
retry of an event, a restart, and a mention arriving as both `app_mention` and `message` are
answered once, and a delivery is never claimed without its message being stored. Only what
stores no message (a stop, a refusal note) is claimed on its own, so that a late retry cannot
stop a newer run or repeat a note. What remains is the window between the acknowledgement and
that transaction (the name, the files, the thread's backfill), which Slack will not cover by
redelivering: every message event is therefore written to the journal (`bots.journal`)
before its listener returns (the return is the ack), marked done when its work is over, and
replayed after a crash (`replay`); accepting is idempotent, so a replay of an event already
accepted is dropped as a duplicate. A graceful shutdown drains the window instead.

Must not: render answers (the surface does), write SQL, or block the acknowledgement.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from bots.access import access_refusal
from bots.incoming import Incoming
from bots.journal import EventJournal, Replay
from bots.runner import STALE_STOP_TEXT, ConversationRunner
from bots.settings import Settings
from bots.slack.backfill import thread_backfill
from bots.slack.blocks import (
    FEEDBACK_ACTION_ID,
    STOP_ACTION_ID,
    parse_feedback_value,
    parse_stop_value,
)
from bots.slack.events import (
    AssistantThreadEvent,
    Ignored,
    IgnoreReason,
    SlackMessage,
    parse_event,
)
from bots.slack.files import Fetched, FileFetcher
from bots.slack.refusals import UNREADABLE_TEXT, external_refusal
from bots.slack.users import UserNames, readable_mentions
from bots.surface import Surface
from core.messages import Author

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], None]
EVENT, ASSISTANT = "event", "assistant"  # which listener an event came through (journal kind)

MAX_KNOWN_THREADS = 10_000
# How long an event's journal write may hold its acknowledgement (Slack waits 3 s): longer,
# and the event is refused (HTTP 500), so that Slack delivers it again.
JOURNAL_MAX_WAIT_S = 2.0
_SLACK_ID = re.compile(r"[A-Za-z0-9]{1,64}")  # as bots.slack.events accepts them in keys
_SLACK_TS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
MAX_TITLE_CHARS = 60
DMS_OFF_TEXT = "Sorry, direct messages to me are turned off here. Mention me in a channel instead."


IDLE_STOP_TEXT = "Nothing is running in this thread, so there was nothing to stop."
SUGGESTED_PROMPTS = (
    {"title": "Summarise a thread", "message": "Summarise the discussion in this thread."},
    {"title": "Explain some code", "message": "Explain what this code does:"},
    {"title": "Draft a reply", "message": "Help me draft a reply to:"},
)


@dataclass(slots=True, frozen=True)
class SlackIdentity:
    """Who Teammate is in this workspace (`auth.test`)."""

    user_id: str
    bot_id: str | None
    team_id: str
    name: str


@dataclass(slots=True, frozen=True)
class ButtonClick:
    """A Stop or feedback button: who clicked, where, and the value the surface gave it."""

    action_id: str
    value: str
    user_id: str
    channel_id: str
    thread_ts: str | None
    team_id: str


class SurfaceMaker(Protocol):
    """Makes the surface that shows the answer to one message (`bots.slack.surface`)."""

    def for_message(self, message: SlackMessage, *, assistant_thread: bool) -> Surface: ...


class SlackListeners:
    def __init__(
        self,
        *,
        runner: ConversationRunner,
        settings: Settings,
        client: Any,
        identity: SlackIdentity,
        names: UserNames,
        fetcher: FileFetcher,
        surfaces: SurfaceMaker,
        spawn: Spawn,
        journal: EventJournal | None = None,
    ) -> None:
        self._runner = runner
        self._journal = journal
        self._settings = settings
        self._client = client
        self._identity = identity
        self._names = names
        self._fetcher = fetcher
        self._surfaces = surfaces
        self._spawn = spawn
        self._known: OrderedDict[str, None] = OrderedDict()  # conversations the store has
        self._inflight: dict[str, asyncio.Future[bool]] = {}  # delivery id → handed over?

    # -- registration ------------------------------------------------------------------------

    def register(self, bolt: Any) -> None:
        """Add the listeners to a bolt `AsyncApp` (created with `process_before_response=True`:
        every listener here only schedules its work, so the acknowledgement is immediate)."""
        from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant

        assistant = AsyncAssistant()
        assistant.thread_started(self._on_assistant_thread_started)
        assistant.thread_context_changed(self._on_assistant_context_changed)
        assistant.user_message(self._on_assistant_message)
        bolt.assistant(assistant)
        bolt.event("app_mention")(self._on_event)
        bolt.event("message")(self._on_event)
        bolt.event("agent_session_stopped")(self._on_native_stop)
        bolt.action(STOP_ACTION_ID)(self._on_stop_button)
        bolt.action(FEEDBACK_ACTION_ID)(self._on_feedback_button)

    async def _on_event(self, body: dict[str, Any]) -> None:
        await self._journaled(EVENT, body)

    async def _on_assistant_message(self, body: dict[str, Any]) -> None:
        await self._journaled(ASSISTANT, body)

    async def _on_assistant_thread_started(self, body: dict[str, Any]) -> None:
        await self._journaled(ASSISTANT, body)

    async def _journaled(self, kind: str, body: dict[str, Any]) -> None:
        """Write the event down, then schedule its work; the ack follows this return. If it
        cannot be written in time this raises: bolt answers 500 and Slack delivers it again."""
        entry = None
        if self._journal is not None and self._may_matter(body):
            async with asyncio.timeout(JOURNAL_MAX_WAIT_S):  # (no task of its own: fewer turns)
                entry = await self._journal.record(kind, body)
        self._spawn(self._then_done(entry, kind, body), _task_name(body))

    def _may_matter(self, body: dict[str, Any]) -> bool:
        """False for an event ignored even if every thread were Teammate's (its own posts,
        edits, joins, other bots): nothing to lose, so nothing to write down."""
        identity = self._identity
        parsed = parse_event(
            body,
            bot_user_id=identity.user_id,
            bot_id=identity.bot_id,
            known_thread=lambda _key: True,
        )
        return not isinstance(parsed, Ignored)

    def replay(self, replay: Replay) -> None:
        """An event a crashed process acknowledged and had not handed over: handle it now."""
        log.info("replaying Slack %s", _task_name(replay.body))
        self._spawn(
            self._then_done(replay.entry, replay.kind, replay.body), _task_name(replay.body)
        )

    async def _then_done(self, entry: int | None, kind: str, body: dict[str, Any]) -> None:
        # Marked done only when the work ended normally: an event whose work failed or was
        # cut short by a shutdown stays in the journal and is replayed at the next start.
        await self.handle_event(body, assistant_thread=kind == ASSISTANT)
        if entry is not None and self._journal is not None:
            await self._journal.done(entry)

    async def _on_assistant_context_changed(self, body: dict[str, Any]) -> None:
        """Nothing to do: Teammate does not use the channel a person is viewing. (Without this
        listener bolt would save the context with extra Web API calls.)"""

    async def _on_native_stop(self, body: dict[str, Any]) -> None:
        self._spawn(self.handle_native_stop(body), _task_name(body))

    async def _on_stop_button(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        click = _click(body)
        if click is not None:
            self._spawn(self.handle_stop_click(click), f"stop-click:{click.channel_id}")

    async def _on_feedback_button(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        click = _click(body)
        if click is not None:
            self._spawn(self.handle_feedback_click(click), f"feedback:{click.channel_id}")

    # -- the work, after the acknowledgement ------------------------------------------------

    async def handle_event(self, body: dict[str, Any], *, assistant_thread: bool) -> None:
        parsed = await self._parse(body)
        if isinstance(parsed, Ignored):
            log.debug("event ignored: %s %s", parsed.reason, parsed.detail)
            return
        if isinstance(parsed, AssistantThreadEvent):
            if parsed.kind == "started":
                await self._assistant_thread_started(parsed)
            return
        await self._handle_message(parsed, assistant_thread=assistant_thread)

    async def _parse(self, body: dict[str, Any]) -> SlackMessage | AssistantThreadEvent | Ignored:
        """`parse_event`, with "is Teammate part of this thread?" answered from the store: the
        parser is pure, so a reply it cannot place is parsed again once the store has said."""
        asked: list[str] = []

        def ask(key: str) -> bool:
            asked.append(key)
            return False

        identity = self._identity
        parsed = parse_event(
            body, bot_user_id=identity.user_id, bot_id=identity.bot_id, known_thread=ask
        )
        if not (isinstance(parsed, Ignored) and parsed.reason is IgnoreReason.NOT_ADDRESSED):
            return parsed
        if not asked:
            return parsed
        key = asked[0]
        channel_key = key.rsplit(":", 1)[0]
        if not self._settings.follow_ups_for(channel_key) or not await self._is_known(key):
            return parsed
        return parse_event(
            body,
            bot_user_id=identity.user_id,
            bot_id=identity.bot_id,
            known_thread=lambda _key: True,
        )

    async def _handle_message(self, message: SlackMessage, *, assistant_thread: bool) -> None:
        if message.is_dm and not self._settings.slack.dms_enabled:  # assistant threads too
            await self._refuse(message, DMS_OFF_TEXT)
            return
        refusal = external_refusal(self._settings.slack.external_teams, message.external_team)
        if refusal is None:
            refusal = access_refusal(self._settings, message.to_incoming(message.user_id))
        if refusal is not None:
            if message.mentioned or message.is_dm:  # asked Teammate: tell them why not
                await self._refuse(message, refusal)
            else:  # a reply in its thread, maybe to someone else: no note on every message
                log.info("ignored %s in %s: not allowed", message.user_id, message.channel_key)
            return
        if message.stop_requested or message.unreadable_files:
            await (
                self._stop(message)
                if message.stop_requested
                else self._refuse(message, UNREADABLE_TEXT)
            )
            return
        # The same message through its other event (`app_mention` and `message`), or a retry,
        # may be being handed to the runner now: wait for it instead of downloading and reading
        # the thread twice. Only if it failed before the runner answered do we try again.
        earlier = self._inflight.get(message.delivery_id)
        if earlier is not None and await asyncio.shield(earlier):
            return
        handed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._inflight[message.delivery_id] = handed
        try:
            await self._submit(message, assistant_thread=assistant_thread)
            handed.set_result(True)
        finally:
            if not handed.done():
                handed.set_result(False)
            if self._inflight.get(message.delivery_id) is handed:
                del self._inflight[message.delivery_id]

    async def _submit(self, message: SlackMessage, *, assistant_thread: bool) -> None:
        known = await self._is_known(message.conversation_key)
        backfill_wanted = message.in_thread and not known and not assistant_thread
        name, fetched, backfill, text = await asyncio.gather(
            self._names.name(message.user_id),
            self._fetcher.fetch(message.files) if message.files else _nothing_fetched(),
            thread_backfill(
                self._client,
                channel_id=message.channel_id,
                thread_ts=message.thread_ts,
                before_ts=message.ts,
                bot_user_id=self._identity.user_id,
                bot_id=self._identity.bot_id,
                names=self._names,
            )
            if backfill_wanted
            else _no_backfill(),
            readable_mentions(message.text, self._names),
        )
        incoming = message.to_incoming(name, attachments=fetched.attachments, backfill=backfill)
        incoming = dataclasses.replace(
            incoming,
            text=text + fetched.note(),
            also_claim=(message.event_delivery_id,),
        )
        surface = self._surfaces.for_message(message, assistant_thread=assistant_thread)
        result = await self._runner.submit(incoming, surface)
        log.info("%s from %s in %s: %s", message.kind, message.user_id, message.channel_id, result)
        if result in ("started", "steered"):
            self._remember(message.conversation_key)
            if assistant_thread and not known:
                await self._set_title(message)

    async def _stop(self, message: SlackMessage) -> None:
        # A stop stores no message: claimed on its own, so a retry minutes later cannot stop
        # a run that started since.
        if not await self._runner.conversations.claim_delivery(message.delivery_id):
            return
        by = Author(id=message.user_id, name=await self._names.name(message.user_id))
        result = self._runner.stop(message.conversation_key, by=by)
        if result == "idle" and message.is_dm and not message.in_thread:
            # In a DM every top-level message starts its own thread: a top-level "stop" means
            # the answer being written in the DM, whichever thread it is in.
            stopped = [
                self._runner.stop(key, by=by)
                for key in self._runner.running_in(message.channel_key)
            ]
            result = "stopped" if "stopped" in stopped else "idle"
        log.info("stop in %s by %s: %s", message.conversation_key, message.user_id, result)
        if result == "idle":
            await self._ephemeral(
                message.channel_id, message.user_id, message.thread_ts, IDLE_STOP_TEXT
            )

    async def _refuse(self, message: SlackMessage, text: str) -> None:
        log.info("refused %s in %s", message.user_id, message.channel_key)
        if await self._runner.conversations.claim_delivery(message.delivery_id):
            await self._ephemeral(message.channel_id, message.user_id, message.thread_ts, text)

    async def handle_stop_click(self, click: ButtonClick) -> None:
        run_id = parse_stop_value(click.value)
        if run_id is None or click.thread_ts is None:
            log.warning("a Stop button with an unreadable value was clicked")
            return
        # The button sits in the answer's thread: that thread is the conversation, so a
        # button can only ever stop a run of the thread it was clicked in. Its team is the
        # installation's (the key's), or the clicker's in a channel shared between workspaces.
        keys = [
            f"slack:{team}:{click.channel_id}:{click.thread_ts}"
            for team in dict.fromkeys((self._identity.team_id, click.team_id))
            if team
        ]
        key = next((k for k in keys if self._runner.current_run(k) == run_id), keys[0])
        name = await self._names.name(click.user_id)
        refusal = access_refusal(self._settings, _clicker(click, key, name))
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)
            return
        result = self._runner.stop(key, run_id, by=Author(id=click.user_id, name=name))
        log.info("Stop button for run %s in %s: %s", run_id, key, result)
        if result != "stopped":
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, STALE_STOP_TEXT)

    async def handle_native_stop(self, body: dict[str, Any]) -> None:
        """Slack's own stop button on an agent session (`agent_session_stopped`): stops the
        answer being written in that thread, like our Stop button (what is queued behind it
        is still answered)."""
        stopped = _native_stop(body)
        if stopped is None:
            log.warning("an agent_session_stopped event without a readable thread; ignored")
            return
        event_id, team_id, channel_id, thread_ts, user_id = stopped
        if not await self._runner.conversations.claim_delivery(f"slack:event:{event_id}"):
            return  # a retry: the first one stopped it
        key = f"slack:{team_id}:{channel_id}:{thread_ts}"
        run_id = self._runner.current_run(key)
        if run_id is None:
            return
        by = Author(id=user_id, name=await self._names.name(user_id))
        result = self._runner.stop(key, run_id, by=by)
        log.info("Slack's stop for run %s in %s: %s", run_id, key, result)

    async def handle_feedback_click(self, click: ButtonClick) -> None:
        vote = parse_feedback_value(click.value)
        if vote is None:
            log.warning("a feedback button with an unreadable value was clicked")
            return
        run_id, choice = vote
        # Counted only from people allowed here, and only for a run of the channel clicked in
        # (a value naming another channel's run is a forgery): the key's team is the
        # installation's, or the clicker's in a channel shared between workspaces.
        channels = [
            f"slack:{team}:{click.channel_id}"
            for team in dict.fromkeys((self._identity.team_id, click.team_id))
            if team
        ]
        if not click.channel_id or not channels:
            return
        name = await self._names.name(click.user_id)
        clicker = _clicker(click, f"{channels[0]}:{click.thread_ts or ''}", name)
        refusal = access_refusal(self._settings, clicker)
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)
            return
        try:
            await self._runner.conversations.set_feedback(
                run_id, click.user_id, choice, channel_keys=channels
            )
        except (KeyError, ValueError):
            log.warning("feedback for run %s, unknown in %s, ignored", run_id, channels)
            return
        log.info("feedback %s on run %s by %s", choice, run_id, click.user_id)

    async def _assistant_thread_started(self, event: AssistantThreadEvent) -> None:
        try:
            await self._client.assistant_threads_setSuggestedPrompts(
                channel_id=event.channel_id,
                thread_ts=event.thread_ts,
                prompts=list(SUGGESTED_PROMPTS),
            )
        except Exception as exc:  # a workspace without the AI-app feature: nothing to show
            log.info("suggested prompts not set: %s", _error_name(exc))

    async def _set_title(self, message: SlackMessage) -> None:
        title = " ".join(message.text.split())[:MAX_TITLE_CHARS] or "Conversation"
        try:
            await self._client.assistant_threads_setTitle(
                channel_id=message.channel_id, thread_ts=message.thread_ts, title=title
            )
        except Exception as exc:
            log.info("assistant thread title not set: %s", _error_name(exc))

    async def _ephemeral(
        self, channel_id: str, user_id: str, thread_ts: str | None, text: str
    ) -> None:
        try:
            await self._client.chat_postEphemeral(
                channel=channel_id,
                user=user_id,
                text=text,
                **({"thread_ts": thread_ts} if thread_ts else {}),
            )
        except Exception as exc:  # e.g. the person is not in the channel: nothing else to do
            log.info("ephemeral note not posted in %s: %s", channel_id, _error_name(exc))

    # -- which threads Teammate is part of ---------------------------------------------------

    async def _is_known(self, conversation_key: str) -> bool:
        if conversation_key in self._known:
            self._known.move_to_end(conversation_key)
            return True
        found = await self._runner.conversations.known(conversation_key)
        if found:
            self._remember(conversation_key)
        return found

    def _remember(self, conversation_key: str) -> None:
        self._known[conversation_key] = None
        self._known.move_to_end(conversation_key)
        while len(self._known) > MAX_KNOWN_THREADS:
            self._known.popitem(last=False)


async def _nothing_fetched() -> Fetched:
    return Fetched((), ())


async def _no_backfill() -> tuple[()]:
    return ()


def _task_name(body: dict[str, Any]) -> str:
    event_id = body.get("event_id") if isinstance(body, dict) else None
    return f"slack-event:{event_id if isinstance(event_id, str) else '?'}"


def _click(body: dict[str, Any]) -> ButtonClick | None:
    """The first action of a block-actions payload, or None if its shape is not Slack's."""
    try:
        action = body["actions"][0]
        channel = body.get("channel") or {}
        container = body.get("container") or {}
        message = body.get("message") or {}
        thread_ts = container.get("thread_ts") or message.get("thread_ts") or message.get("ts")
        team = body.get("team") or {}
        value = action.get("value")
        if value is None:  # feedback buttons carry the chosen button's value
            value = (action.get("selected_option") or {}).get("value")
        return ButtonClick(
            action_id=str(action["action_id"]),
            value=str(value or "")[:200],
            user_id=str(body["user"]["id"]),
            channel_id=str(channel.get("id") or container.get("channel_id") or ""),
            thread_ts=str(thread_ts) if thread_ts else None,
            team_id=str(team.get("id") or body["user"].get("team_id") or ""),
        )
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _native_stop(body: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
    """(event id, team, channel, thread_ts, user) of an `agent_session_stopped` envelope."""
    event = body.get("event") if isinstance(body, dict) else None
    if not isinstance(event, dict):
        return None
    fields = (
        body.get("event_id"),
        body.get("team_id") or event.get("team"),
        event.get("channel"),
        event.get("thread_ts"),
        event.get("user"),
    )
    if not all(isinstance(f, str) for f in fields):
        return None
    event_id, team, channel, thread_ts, user = (str(f) for f in fields)
    ids_ok = all(_SLACK_ID.fullmatch(v) for v in (event_id, team, channel, user))
    if not ids_ok or not _SLACK_TS.fullmatch(thread_ts):
        return None
    return event_id, team, channel, thread_ts, user


def _clicker(click: ButtonClick, conversation_key: str, name: str) -> Incoming:
    """The click as the allow-lists see it."""
    channel_key = conversation_key.rsplit(":", 1)[0]
    return Incoming(
        conversation_key=conversation_key,
        channel_key=channel_key,
        author=Author(id=click.user_id, name=name),
        text="",
        delivery_id="",
        timestamp=0.0,
    )


def _error_name(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    return str(error) if error else type(exc).__name__
