"""What Teammate does with each Slack event, button click and assistant-thread event.

Owns: `SlackListeners`: its handlers for events (mentions, messages, AI-app threads, the
native Stop: routed by `bots.platforms.slack.event_route`), the Stop and feedback buttons (bolt
listeners), and the work behind each, which
runs after the acknowledgement in a task the app tracks (a click's is
`bots.platforms.slack.clicks`): translate the payload (`bots.platforms.slack.events`), check
the allow-lists and DMs, stop on `@teammate stop`, otherwise look up the author's name,
download the files, read the thread so far when Teammate is new to it, and hand the message
to the runner with its surface.

De-duplication (docs/architecture.md, "The runner"): the message's channel+ts id and Slack's
event id are claimed in the store's one accepting transaction (`Incoming.also_claim`), so a
retry of an event, a restart, and a mention arriving as both `app_mention` and `message` are
answered once, and a delivery is never claimed without its message being stored; in front of
it, `bots.delivery_dedup` spares a repeat the slow work while the first is handed over. Only
what stores no message (a stop, a refusal note) is claimed on its own, so that a late retry
cannot stop a newer run or repeat a note. What remains is the window between the
acknowledgement and that transaction (the name, the files, the thread's backfill), which
Slack will not cover by redelivering: every message event is therefore written to the
journal (`bots.journal`) before its listener returns (the return is the ack), marked done
when its work is over, and replayed after a crash (`replay`); accepting is idempotent, so a
replay of an event already accepted is dropped as a duplicate. A graceful shutdown drains
the window instead.

Must not: render answers (the surface does), write SQL, or block the acknowledgement.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from bots.access import access_refusal
from bots.delivery_dedup import DeliveryDedup
from bots.journal import EventJournal, Replay
from bots.known_threads import KnownConversations
from bots.platforms.slack.approval_blocks import APPROVAL_ACTION_IDS
from bots.platforms.slack.backfill import thread_backfill
from bots.platforms.slack.blocks import (
    FEEDBACK_ACTION_ID,
    STOP_ACTION_ID,
)
from bots.platforms.slack.clicks import SlackClicks, parse_click
from bots.platforms.slack.event_route import EventRoute, Route
from bots.platforms.slack.events import (
    AssistantThreadEvent,
    Ignored,
    IgnoreReason,
    SlackMessage,
    parse_event,
)
from bots.platforms.slack.files import Fetched, FileFetcher
from bots.platforms.slack.refusals import UNREADABLE_TEXT, external_refusal
from bots.platforms.slack.users import UserNames, readable_mentions
from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.surface.contract import Surface
from core.messages import Author

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], None]
EVENT, ASSISTANT = "event", "assistant"  # which listener an event came through (journal kind)

# How long an event's journal write may hold its acknowledgement (Slack waits 3 s): longer,
# and the event is refused (HTTP 500), so that Slack delivers it again.
JOURNAL_MAX_WAIT_S = 2.0
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


class SurfaceMaker(Protocol):
    """Makes the surface that shows the answer to one message (`bots.platforms.slack.surface`)."""

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
        # Threads Teammate is part of. Not those it is not: another instance may start one.
        self._known = KnownConversations(runner.conversations.known)
        self._deliveries = DeliveryDedup()
        self._clicks = SlackClicks(
            runner=runner,
            settings=settings,
            team_id=identity.team_id,
            names=names,
            ephemeral=self._ephemeral,
        )

    # -- registration ------------------------------------------------------------------------

    def register(self, bolt: Any, route: EventRoute) -> None:
        """Add the handlers: events through `route` (ahead of bolt's listener matching), the
        buttons as bolt listeners (bolt runs with `process_before_response=True`: every
        handler here only schedules its work, so the acknowledgement is immediate)."""
        route.handle(Route.EVENT, self._on_event)
        route.handle(Route.ASSISTANT, self._on_assistant_event)
        route.handle(Route.NATIVE_STOP, self._on_native_stop)
        bolt.action(STOP_ACTION_ID)(self._on_stop_button)
        bolt.action(FEEDBACK_ACTION_ID)(self._on_feedback_button)
        for action_id in APPROVAL_ACTION_IDS.values():
            bolt.action(action_id)(self._on_approval_button)

    async def _on_event(self, body: dict[str, Any]) -> None:
        await self._journaled(EVENT, body)

    async def _on_assistant_event(self, body: dict[str, Any]) -> None:
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

    async def _on_native_stop(self, body: dict[str, Any]) -> None:
        self._spawn(self._clicks.handle_native_stop(body), _task_name(body))

    async def _on_stop_button(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        click = parse_click(body)
        if click is not None:
            self._spawn(self._clicks.handle_stop_click(click), f"stop-click:{click.channel_id}")

    async def _on_feedback_button(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        click = parse_click(body)
        if click is not None:
            self._spawn(self._clicks.handle_feedback_click(click), f"feedback:{click.channel_id}")

    async def _on_approval_button(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        click = parse_click(body)
        if click is not None:
            self._spawn(self._clicks.handle_approval_click(click), f"approval:{click.channel_id}")

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
        if not self._settings.follow_ups_for(channel_key) or not await self._known.ask(key):
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
        async with self._deliveries.first(message.delivery_id) as first:
            if first:
                await self._submit(message, assistant_thread=assistant_thread)

    async def _submit(self, message: SlackMessage, *, assistant_thread: bool) -> None:
        known = await self._known.ask(message.conversation_key)
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
            self._known.remember(message.conversation_key)
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


async def _nothing_fetched() -> Fetched:
    return Fetched((), ())


async def _no_backfill() -> tuple[()]:
    return ()


def _task_name(body: dict[str, Any]) -> str:
    event_id = body.get("event_id") if isinstance(body, dict) else None
    return f"slack-event:{event_id if isinstance(event_id, str) else '?'}"


def _error_name(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    return str(error) if error else type(exc).__name__
