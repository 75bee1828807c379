"""One run (or one steered message) shown in a Slack thread.

Owns: `SlackSurface` (the Surface of bots/surface/contract.py for Slack, on `bots.surface.base`):
its state machine (`Phase`, the diagram in the class's docstring) and the three paths that race to
show a run first; `SlackSurfaces` (surfaces for earlier runs' refs, for recovery). Its parts:
the Web API calls (`surface_calls`), the native stream (`stream`), the run's text as narration
and answer (`surface_text`), the in-progress message (`surface_progress`), the final answer and
its layout (`surface_final`), reactions and the status line
(`surface_status`), notices and files (`surface_notices`), `SlackFeatures` and
`SurfaceOptions` (`surface_options`, re-exported here).

How an answer looks:
- At the end the run's outcome mark on the person's message, as on every platform
  (`bots.surface.base`): ✅ answered, ⏹️ (`black_square_for_stop`) stopped, ⚠️ (`warning`)
  interrupted by a restart, ❌ (`x`) failed. 👀 only for a slow answer: when nothing of it is
  visible after `working_delay_s` (about a second), so that a quick answer costs two or three
  calls (its message writes and ✅) instead of five.
- The assistant status line ("thinking…", "running grep…") where the workspace has it, from
  `working_delay_s` on; thinking streams as status, never as text. A reply that calls tools
  narrates with its text, or else (the 5.5 models) with its thinking (`bots.surface.narration`),
  shown where its text would have been once the reply ends, before its tool calls run.
- Text streams natively (chat.startStream / appendStream / stopStream) where Slack allows it,
  else into one in-progress message updated at most about once a second (`bots.surface.throttle`).
  Slack ends a stream about five minutes after it started (`message_not_in_streaming_state`,
  undocumented): the answer then goes on in the same message by chat.update, about once a
  second, and the final answer replaces it there, whole and once (`stream`).
- The in-progress message carries a Stop button (the run id in its value) and one legacy
  attachment per tool call; it is posted as soon as there is something to show (text in the
  fallback, a tool call, or `activity_delay_s` of work), so a quick answer costs two writes.
- The layout, top to bottom (`surface_final`): a run that used tools shows its tool activity
  first, then its answer. The activity is the in-progress message with the narration (the text
  of replies that called tools, or their thinking; `surface_text`), "Used N tools." and the
  calls; the answer below it is only the text written after the last tool call. A reply's
  text streams as it is written (it may be the answer); once that reply calls tools, its
  stream is retired: stopped and made the in-progress message, or deleted when that message
  is already up above it (the narration shows there), and the answer streams in a new
  message below. A run without tools is its answer alone.
- The final answer is standard Markdown in `markdown` blocks, split across messages at safe
  boundaries (`bots.surface.markdown_split`), with how the run ended, an optional usage line
  and 👍/👎 under the last part; the Stop button goes away.
- Rate limits: a 429 is retried after its Retry-After (bounded); a write that is not
  idempotent (posting, streaming) is never retried after a transport error, because Slack may
  have carried it out. The final answer is never lost to a failed update: it is posted instead.
  Every message carries `metadata` naming the run and part, so an ambiguous post is looked up
  in the thread before it is posted again.

A steered message's surface sees only private notices (ephemeral messages to its author).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack import blocks
from bots.platforms.slack.stream import NativeStream
from bots.platforms.slack.surface_approvals import ApprovalMessages
from bots.platforms.slack.surface_calls import ThreadCalls
from bots.platforms.slack.surface_final import FinalAnswer
from bots.platforms.slack.surface_notices import NoticePoster, user_id_of
from bots.platforms.slack.surface_options import Outbox, SlackFeatures, SurfaceOptions
from bots.platforms.slack.surface_progress import ProgressMessage
from bots.platforms.slack.surface_states import (
    RUNNING,
    SHOWS_ACTIVITY,
    TRANSITIONS,
    Phase,
    Race,
    next_phase,
)
from bots.platforms.slack.surface_status import (
    DONE_REACTION,
    FAILED_REACTION,
    INTERRUPTED_REACTION,
    STOPPED_REACTION,
    THINKING_STATUS,
    WORKING_REACTION,
    Reactions,
    StatusLine,
)
from bots.platforms.slack.surface_text import RunText
from bots.surface.base import SurfaceBase
from bots.surface.contract import FileOut, Notice, RunFinished, RunStarted
from bots.surface.throttle import Throttle
from core.events import ToolExecutionEnd, ToolExecutionStart
from core.messages import AssistantMessage, Usage

__all__ = [
    "DONE_REACTION",
    "FAILED_REACTION",
    "INTERRUPTED_REACTION",
    "STOPPED_REACTION",
    "WORKING_REACTION",
    "Phase",
    "SlackFeatures",
    "SlackSurface",
    "SlackSurfaces",
    "SurfaceOptions",
]

log = logging.getLogger(__name__)

PLATFORM = "slack"


class SlackSurface(ApprovalMessages, SurfaceBase):
    """Shows one run, or one steered message's notices, in a Slack thread.

    `message_ts` is the person's message (for the reactions); `user_id` and `team_id` are who
    the answer streams to (Slack needs them to stream in channels). `recovered` marks a
    surface made from an earlier run's ref after a restart.

    Its phases (`bots.platforms.slack.surface_states`). Three paths race to show a run first, and
    meet in `_race`: the working delay's timer (👀), the activity delay's timer (the in-progress
    message with its Stop button) and the throttled flush (the stream, or that message)::

      IDLE ──run_started──▶ QUIET ──working delay, nothing shows (👀)──▶ WORKING_SHOWN
       │                      │                                              │
       │                      ├────────── the flush starts the stream ───────┤
       │                      │                                              ▼
       │                      │                                         STREAMING
       │                      │                   activity delay, with   │       │ activity delay,
       │                      │                   tool calls (or the     │       │ streaming alone
       │                      │                   stream fell back)      │       ▼
       │                      ├──activity delay──▶ ACTIVITY_DUE ◀────────┴─── STREAM_HELD
       │                      │  (or WORKING_SHOWN)     │              activity delay
       │                      │                         ▼ the flush posted the message
       │                      └──a tool call, or ──▶ ACTIVITY_POSTED
       │                         fallback text         (the post, from any running phase;
       │                                                or STREAMING / STREAM_HELD: the stream
       │                                                showed narration and its message
       │                                                became the in-progress message)
       │
       │   any running phase ──run_finished (close() without one: an error)──▶ FINISHING
       ├──run_finished (a recovered surface) ───────────────────────────────▶ FINISHING
       │                                                                          │ the end shown
       └──close() (a steered message's surface) ──▶ CLOSED ◀──close()── DONE ◀────┘

    The running phases are QUIET … ACTIVITY_POSTED; from FINISHING on nothing but the end is
    written. The facts kept beside the phase: whether 👀 was added (`Reactions`), whether the
    status line may show (`StatusLine`), the stream's own (`NativeStream`: starting, broken,
    expired by Slack; which replies it shows, `_stream_from`) and what was posted (`Outbox`,
    the ref).
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        team_id: str,
        channel: str,
        thread_ts: str,
        message_ts: str | None = None,
        user_id: str | None = None,
        features: SlackFeatures | None = None,
        options: SurfaceOptions | None = None,
        recovered: bool = False,
        progress_ts: str | None = None,
        stream_ts: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._team_id = team_id
        self._message_ts = message_ts
        self._user_id = user_id
        features = features or SlackFeatures()
        self._options = options or SurfaceOptions()
        self._recovered = recovered
        self._phase = Phase.IDLE
        self._calls = ThreadCalls(client, channel=channel, thread_ts=thread_ts, sleep=sleep)
        self._out = Outbox(progress_ts=progress_ts, stream_ts=stream_ts)
        self._throttle = Throttle(self._flush, self._options.update_interval_s)
        self._progress = ProgressMessage(
            self._calls, self._out, request_flush=self._throttle.request
        )
        self._stream = NativeStream(
            self._calls, features, self._out, team_id=team_id, back_off=self._progress.back_off
        )
        self._final = FinalAnswer(self._calls, self._out, self._stream, recovered=recovered)
        self._reactions = Reactions(self._calls, message_ts, enabled=self._options.reactions)
        self._status = StatusLine(self._calls, features, self._options.update_interval_s)
        self._notices = NoticePoster(self._calls, self._reactions)
        self._text = RunText()
        self._stream_from = 0  # `tool_replies` when the stream started: it shows what came after
        self._tools: dict[str, blocks.ToolView] = {}
        self._activity_timer: asyncio.TimerHandle | None = None
        self._working_timer: asyncio.TimerHandle | None = None
        self._working_task: asyncio.Task[None] | None = None
        self._checkpoint: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def from_ref(
        cls,
        client: AsyncWebClient,
        ref: dict[str, Any],
        *,
        options: SurfaceOptions | None = None,
    ) -> SlackSurface | None:
        """A surface where an earlier run was shown (`ref` as this class wrote it), or None
        if `ref` is not a Slack surface's."""
        if ref.get("platform") != PLATFORM:
            return None
        channel, thread_ts = ref.get("channel"), ref.get("thread_ts")
        if not isinstance(channel, str) or not isinstance(thread_ts, str):
            return None
        return cls(
            client,
            team_id=str(ref.get("team") or ""),
            channel=channel,
            thread_ts=thread_ts,
            message_ts=_str_or_none(ref.get("message_ts")),
            user_id=_str_or_none(ref.get("user")),
            features=SlackFeatures(streaming=False, status_line=False),
            options=options,
            recovered=True,
            progress_ts=_str_or_none(ref.get("progress_ts")),
            stream_ts=_str_or_none(ref.get("stream_ts")),
        )

    @property
    def ref(self) -> dict[str, Any]:
        return {
            "platform": PLATFORM,
            "team": self._team_id,
            "channel": self._calls.channel,
            "thread_ts": self._calls.thread_ts,
            "message_ts": self._message_ts,
            "user": self._user_id,
            "progress_ts": self._out.progress_ts,
            "stream_ts": self._out.stream_ts,
        }

    @property
    def phase(self) -> Phase:
        return self._phase

    def set_checkpoint(self, checkpoint: Callable[[], Awaitable[None]]) -> None:
        self._checkpoint = checkpoint

    # -- the state machine ---------------------------------------------------------------------

    def _enter(self, phase: Phase, why: str) -> None:
        """The one place the phase changes. An illegal transition is a bug: logged, refused."""
        if phase is self._phase:
            return
        if phase not in TRANSITIONS[self._phase]:
            log.error("slack surface: no transition %s → %s (%s)", self._phase, phase, why)
            return
        log.debug("slack surface: %s → %s (%s)", self._phase.value, phase.value, why)
        self._phase = phase

    def _race(self, path: Race) -> Phase:
        """Where the paths racing to show the run first meet (`next_phase` decides)."""
        streams_alone = self._stream.live and not self._tools
        self._enter(next_phase(self._phase, path, streams_alone=streams_alone), path.value)
        return self._phase

    def _showing(self) -> bool:
        """Some of the answer is on screen, or on its way there (its text exists, so the
        next flush shows it): no 👀 needed."""
        return (
            self._out.progress_ts is not None
            or self._out.stream_ts is not None
            or self._stream.starting
            or self._text.any()
        )

    # -- the hooks -----------------------------------------------------------------------------

    async def on_run_started(self, event: RunStarted) -> None:
        self._calls.run_id = event.run_id
        self._enter(Phase.QUIET, "run_started")
        if event.author is not None and self._user_id is None:
            self._user_id = user_id_of(event.author)
        # No 👀 and no status yet: a quick answer is its own acknowledgement.
        loop = asyncio.get_running_loop()
        if self._options.working_delay_s <= 0:
            await self._show_working()
        else:
            self._working_timer = loop.call_later(self._options.working_delay_s, self._working_due)
        self._activity_timer = loop.call_later(self._options.activity_delay_s, self._activity)

    async def on_text(self, message: AssistantMessage, delta: str) -> None:
        self._text.writing(message)
        self._throttle.request()

    async def on_thinking(self) -> None:
        self._want_status(THINKING_STATUS)

    async def on_reply_ended(self, message: AssistantMessage) -> None:
        if self._text.reply_ended(message):
            self._throttle.request()

    async def on_tool_started(self, event: ToolExecutionStart) -> None:
        view = blocks.ToolView(event.tool_call_id, event.tool_name, event.label, event.arguments)
        self._tools[event.tool_call_id] = view
        self._want_status(f"running {event.tool_name}…")
        self._throttle.request()

    async def on_tool_ended(self, event: ToolExecutionEnd) -> None:
        view = self._tools.get(event.tool_call_id)
        if view is not None:
            view.ok = not event.is_error
            view.output = event.result.text()
            view.duration_s = event.duration_s
            self._want_status(THINKING_STATUS)
            self._throttle.request()

    async def on_notice(self, event: Notice) -> None:
        await self._notices.show(event)

    async def on_file(self, event: FileOut) -> None:
        await self._notices.attach(event)

    async def on_run_finished(self, event: RunFinished) -> None:
        await self._finish(event)

    async def close(self) -> None:
        if self._phase is Phase.CLOSED:
            return
        if self._phase in RUNNING:
            # The runner always reports how a run ended; if it could not, say so rather
            # than leave a Stop button on a run that is gone.
            await self._finish(
                RunFinished(
                    conversation_key="",
                    run_id=self._calls.run_id or 0,
                    outcome="error",
                    usage=Usage(),
                    final_text="",
                    error_text="This answer ended unexpectedly.",
                )
            )
        await self._throttle.close()
        await self._status.close()
        self._cancel_timers()
        self._enter(Phase.CLOSED, "close")

    # -- the racing paths --------------------------------------------------------------------

    def _working_due(self) -> None:
        self._working_timer = None
        self._working_task = asyncio.create_task(self._show_working(), name="slack-working")

    async def _show_working(self) -> None:
        """The run is slow: the status line may show from now on, and 👀 says "seen" if no
        part of the answer is visible yet."""
        if self._phase not in RUNNING:
            return
        self._status.allow()
        if self._reactions.enabled and not self._showing():
            self._race(Race.WORKING_DELAY)
            await self._reactions.show_working()

    def _activity(self) -> None:
        self._activity_timer = None
        phase = self._race(Race.ACTIVITY_DELAY)
        if phase is Phase.STREAM_HELD:  # (entered just now: it is left at the next delay)
            loop = asyncio.get_running_loop()
            self._activity_timer = loop.call_later(self._options.activity_delay_s, self._activity)
        elif phase in RUNNING:
            self._throttle.request()

    async def _flush(self) -> None:
        """Throttled: bring Slack up to date with the answer so far. After a 429 nothing is
        sent until its Retry-After has passed; then the state of that moment is shown."""
        if self._phase not in RUNNING or self._progress.quiet:
            return
        if self._stream_holds_narration():
            await self._retire_stream()
        due = self._phase in SHOWS_ACTIVITY
        text = self._text.answer()
        tools = list(self._tools.values())
        # The tool activity goes up before the answer starts streaming: it stays above it.
        first = self._out.progress_ts is None and bool(tools or self._text.narration().strip())
        if first:
            await self._show_progress(text, tools, due=due)
            if self._progress.quiet:  # (a 429: the stream waits too)
                return
        if self._stream.native and text:
            if self._stream.not_started:
                self._race(Race.STREAM_STARTING)
                self._stream_from = self._text.tool_replies
            await self._stream.write(text, user_id=self._user_id)
        if not first:  # (the activity delay may have passed meanwhile)
            await self._show_progress(text, tools, due=due or self._phase in SHOWS_ACTIVITY)

    async def _show_progress(self, text: str, tools: list[blocks.ToolView], *, due: bool) -> None:
        """The in-progress message: the narration, and the answer where it cannot stream."""
        shown = self._text.narration()
        if not self._stream.native and text.strip():
            shown = f"{shown}\n\n{text}" if shown else text
        if not (tools or due or shown.strip()):
            return
        body = blocks.progress_message(
            text=shown, run_id=self._calls.run_id, tools=tools, status=self._progress_status(tools)
        )
        if await self._progress.show(body):
            self._race(Race.PROGRESS_POSTED)

    def _stream_holds_narration(self) -> bool:
        """The stream started before a reply that called tools ended: what it shows is
        narration, not the answer."""
        return self._out.stream_ts is not None and self._stream_from != self._text.tool_replies

    async def _retire_stream(self) -> None:
        """Take the narration out of the answer's way: the stream ends and its message becomes
        the in-progress message (or, with that message already up above it, is deleted: the
        narration shows there); the answer streams in a new message, below the activity."""
        ts = self._out.stream_ts
        assert ts is not None
        await self._stream.retire()
        self._stream_from = self._text.tool_replies
        if self._out.progress_ts is None:
            self._progress.adopt(ts)
            self._race(Race.STREAM_ADOPTED)
        else:
            await self._calls.delete(ts)

    def _cancel_timers(self) -> None:
        for timer in (self._activity_timer, self._working_timer):
            if timer is not None:
                timer.cancel()
        self._activity_timer = self._working_timer = None

    # -- the answer so far -----------------------------------------------------------------------

    def _progress_status(self, tools: list[blocks.ToolView]) -> str:
        running = [view for view in tools if view.ok is None]
        if running:
            return f"Running {running[-1].label or running[-1].name}…"
        if self._text.writing_text():
            return "Writing…"
        return "Working…"

    def _want_status(self, status: str) -> None:
        if self._phase in RUNNING:
            self._status.want(status)

    # -- the end ---------------------------------------------------------------------------------

    async def _finish(self, event: RunFinished) -> None:
        if self._phase not in RUNNING and self._phase is not Phase.IDLE:
            return
        self._enter(Phase.FINISHING, "run_finished")
        try:
            await self._show_end(event)
        finally:
            self._enter(Phase.DONE, "the end shown")

    async def _show_end(self, event: RunFinished) -> None:
        self._cancel_timers()
        if self._working_task is not None:  # a 👀 in flight lands before it is taken away
            await self._working_task
        await self._throttle.close()  # an update in flight completes; nothing new starts
        if self._stream_holds_narration():  # (the run ended in its tool calls)
            await self._retire_stream()
        if self._checkpoint is not None:  # the messages posted so far, stored before the end
            await self._checkpoint()
        self._calls.run_id = self._calls.run_id or event.run_id
        body = self._text.final(event.final_text)
        error_text = event.error_text
        if error_text is not None and error_text.strip() in self._notices.shown:
            error_text = None  # already said, as a notice
        extras = blocks.final_extras(
            run_id=self._calls.run_id,
            outcome_text=blocks.outcome_line(event.outcome, error_text, event.reference),
            feedback=bool(body.strip()) and event.outcome != "interrupted",
            usage=event.usage if self._options.usage_footer and not self._recovered else None,
        )
        try:
            await self._final.show(
                body,
                extras,
                list(self._tools.values()),
                event.outcome,
                narration=self._text.narration(),
            )
        finally:
            await self._status.clear()
            await self._reactions.show_outcome(event.outcome, recovered=self._recovered)


class SlackSurfaces:
    """A SurfaceFactory for Slack refs (recovery reports an interrupted run where it was)."""

    def __init__(self, client: AsyncWebClient, *, options: SurfaceOptions | None = None) -> None:
        self._client = client
        self._options = options

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> SlackSurface | None:
        return SlackSurface.from_ref(self._client, ref, options=self._options)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
