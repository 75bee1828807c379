"""One run (or one steered message) shown in a Slack thread.

Owns: `SlackSurface` (the Surface of bots/surface.py for Slack), `SlackSurfaces` (surfaces for
earlier runs' refs, for recovery), `SlackFeatures` (what this workspace supports, learnt once
and shared by every surface of an app) and `SurfaceOptions`.

How an answer looks:
- At the end ✅ (answered), ⏹️ (`black_square_for_stop`: stopped) or ❌ (`x`: failed or
  interrupted by a restart) on the person's message. 👀 only for a slow answer: when nothing
  of it is visible after `working_delay_s` (about a second), so that a quick answer costs two
  or three calls (its message writes and ✅) instead of five.
- The assistant status line ("thinking…", "running grep…") where the workspace has it, from
  `working_delay_s` on; thinking streams as status, never as text. A reply that calls tools
  narrates with its text, or else (the 5.5 models) with its thinking (`bots.narration`),
  shown where its text would have been once the reply ends, before its tool calls run.
- Text streams natively (chat.startStream / appendStream / stopStream) where Slack allows it,
  else into one in-progress message updated at most about once a second (`bots.throttle`).
- The in-progress message carries a Stop button (the run id in its value) and one legacy
  attachment per tool call; it is posted as soon as there is something to show (text in the
  fallback, a tool call, or `activity_delay_s` of work), so a quick answer costs two writes.
- The final answer is standard Markdown in `markdown` blocks, split across messages at safe
  boundaries (`bots.markdown_split`), with how the run ended, an optional usage line and 👍/👎
  under the last part; the Stop button goes away.
- Rate limits: a 429 is retried after its Retry-After (bounded); a write that is not
  idempotent (posting, streaming) is never retried after a transport error, because Slack may
  have carried it out. The final answer is never lost to a failed update: it is posted instead.
  Every message carries `metadata` naming the run and part, so an ambiguous post is looked up
  in the thread before it is posted again.

A steered message's surface sees only private notices (ephemeral messages to its author).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_never

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.narration import visible_text
from bots.slack import blocks
from bots.surface import FileOut, Notice, RunFinished, RunStarted, SurfaceEvent
from bots.throttle import Throttle
from core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from core.messages import AssistantMessage, Author, Usage
from core.models.base import TextDelta, ThinkingDelta, ToolCallDelta

log = logging.getLogger(__name__)

PLATFORM = "slack"
WORKING_REACTION = "eyes"
DONE_REACTION = "white_check_mark"
STOPPED_REACTION = "black_square_for_stop"
FAILED_REACTION = "x"
THINKING_STATUS = "thinking…"

SPLIT_IN_THREAD_CHARS = 50_000  # longer answers are split off the event loop
STREAM_LIMIT = 11_000  # streamed characters; a longer answer is finished by chat.update
MAX_RATE_LIMIT_RETRIES = 8
# Slack answering 5xx to the final answer: tried again after 0.5, 1, 2, 4, 8 s (about 15 s).
SERVER_ERROR_RETRIES = 5
SERVER_ERROR_BACKOFF_S = 0.5
MAX_RETRY_AFTER_S = 60.0
METADATA_EVENT = "teammate_answer"
LOOKUP_PAGES = 5  # conversations.replies pages searched for an ambiguous post

# Errors meaning the app or workspace cannot stream natively: every surface stops trying. Any
# other refusal (a channel type, a missing recipient) falls back for this surface only.
_NO_STREAMING = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "method_deprecated",
    }
)
# Likewise for the assistant status line.
_NO_STATUS_LINE = _NO_STREAMING | {"not_allowed_token_type", "invalid_arguments"}

_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


@dataclass(slots=True)
class SlackFeatures:
    """What the workspace supports, shared by an app's surfaces and corrected by them when
    Slack says otherwise (so only one run pays for finding out)."""

    streaming: bool = True
    status_line: bool = False


@dataclass(slots=True, frozen=True)
class SurfaceOptions:
    usage_footer: bool = False
    update_interval_s: float = 1.0  # Slack allows about one update per second per message
    activity_delay_s: float = 2.0  # post the in-progress message (Stop button) after this
    working_delay_s: float = 1.0  # 👀 and the status line only for a run still going by then
    reactions: bool = True


@dataclass(slots=True)
class _Outbox:
    """What the surface has posted so far (its `ref`)."""

    progress_ts: str | None = None  # the in-progress message (Stop button, tool calls)
    stream_ts: str | None = None  # the natively streamed answer


class SlackSurface:
    """Shows one run, or one steered message's notices, in a Slack thread.

    `message_ts` is the person's message (for the reactions); `user_id` and `team_id` are who
    the answer streams to (Slack needs them to stream in channels). `recovered` marks a
    surface made from an earlier run's ref after a restart.
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
        self._client = client
        self._team_id = team_id
        self._channel = channel
        self._thread_ts = thread_ts
        self._message_ts = message_ts
        self._user_id = user_id
        self._features = features or SlackFeatures()
        self._options = options or SurfaceOptions()
        self._recovered = recovered
        self._sleep = sleep
        self._out = _Outbox(progress_ts=progress_ts, stream_ts=stream_ts)
        self._run_id: int | None = None
        # The answer so far: completed assistant texts, and the reply being written (the
        # loop's working copy, read only when rendering, so a delta costs nothing).
        self._texts: list[str] = []
        self._current: AssistantMessage | None = None
        self._tools: dict[str, blocks.ToolView] = {}
        self._native = self._features.streaming
        self._streamed = ""  # what the native stream shows
        self._stream_broken = False
        self._last_progress: tuple[Any, ...] | None = None
        self._quiet_until = 0.0  # no progress writes before this (monotonic), after a 429
        self._activity_due = False
        self._activity_deferred = False
        self._stream_starting = False  # chat.startStream sent, its answer not read yet
        self._activity_timer: asyncio.TimerHandle | None = None
        self._working_timer: asyncio.TimerHandle | None = None
        self._working_task: asyncio.Task[None] | None = None
        self._working_shown = False  # 👀 was (or is being) added: it must go at the end
        self._status_allowed = False  # the status line waits for `working_delay_s`
        self._shown_notices: set[str] = set()
        self._status_wanted = ""
        self._status_sent = ""
        self._status_used = False
        self._status_off = False  # Slack refused it in this thread
        self._finishing = False
        self._finished = False
        self._outcome = "running"  # how the run ended, once it has
        self._closed = False
        self._throttle = Throttle(self._flush, self._options.update_interval_s)
        self._checkpoint: Callable[[], Awaitable[None]] | None = None
        self._status_throttle = Throttle(self._flush_status, self._options.update_interval_s)

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
            "channel": self._channel,
            "thread_ts": self._thread_ts,
            "message_ts": self._message_ts,
            "user": self._user_id,
            "progress_ts": self._out.progress_ts,
            "stream_ts": self._out.stream_ts,
        }

    # -- the Surface contract ------------------------------------------------------------------

    def set_checkpoint(self, checkpoint: Callable[[], Awaitable[None]]) -> None:
        self._checkpoint = checkpoint

    async def emit(self, event: SurfaceEvent) -> None:
        match event:
            case MessageUpdate(message=message, delta=TextDelta()):
                self._current = message
                self._throttle.request()
            case MessageUpdate(delta=ThinkingDelta()):
                self._want_status(THINKING_STATUS)
            case MessageUpdate(delta=ToolCallDelta()):
                pass
            case MessageEnd(message=AssistantMessage() as message):
                self._current = None
                text = visible_text(message)
                if text.strip():
                    self._texts.append(text)
                    self._throttle.request()
            case ToolExecutionStart(tool_call_id=call_id, tool_name=name, label=label):
                self._tools[call_id] = blocks.ToolView(call_id, name, label, event.arguments)
                self._want_status(f"running {name}…")
                self._throttle.request()
            case ToolExecutionEnd(tool_call_id=call_id):
                view = self._tools.get(call_id)
                if view is not None:
                    view.ok = not event.is_error
                    view.output = event.result.text()
                    view.duration_s = event.duration_s
                    self._want_status(THINKING_STATUS)
                    self._throttle.request()
            case RunStarted():
                await self._start(event)
            case Notice():
                await self._notice(event)
            case FileOut():
                await self._file(event)
            case RunFinished():
                await self._finish(event)
            case (
                AgentStart()
                | TurnStart()
                | MessageStart()
                | MessageUpdate()
                | MessageEnd()
                | ToolExecutionUpdate()
                | TurnEnd()
                | AgentEnd()
            ):
                pass
            case _:
                assert_never(event)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._run_id is not None and not self._finished:
            # The runner always reports how a run ended; if it could not, say so rather
            # than leave a Stop button on a run that is gone.
            await self._finish(
                RunFinished(
                    conversation_key="",
                    run_id=self._run_id,
                    outcome="error",
                    usage=Usage(),
                    final_text="",
                    error_text="This answer ended unexpectedly.",
                )
            )
        await self._throttle.close()
        await self._status_throttle.close()
        self._cancel_timer()

    # -- starting ------------------------------------------------------------------------------

    async def _start(self, event: RunStarted) -> None:
        self._run_id = event.run_id
        if event.author is not None and self._user_id is None:
            self._user_id = _user_id(event.author)
        # No 👀 and no status yet: a quick answer is its own acknowledgement.
        loop = asyncio.get_running_loop()
        if self._options.working_delay_s <= 0:
            await self._show_working()
        else:
            self._working_timer = loop.call_later(self._options.working_delay_s, self._working_due)
        self._activity_timer = loop.call_later(self._options.activity_delay_s, self._activity)

    def _working_due(self) -> None:
        self._working_timer = None
        self._working_task = asyncio.create_task(self._show_working(), name="slack-working")

    async def _show_working(self) -> None:
        """The run is slow: the status line may show from now on, and 👀 says "seen" if no
        part of the answer is visible yet."""
        if self._finishing:
            return
        self._status_allowed = True
        if self._status_wanted:
            self._status_throttle.request()
        if self._options.reactions and self._message_ts is not None and not self._showing():
            self._working_shown = True
            await self._react(WORKING_REACTION, add=True)

    def _showing(self) -> bool:
        """Some of the answer is on screen, or on its way there (its text exists, so the
        next flush shows it): no 👀 needed."""
        return (
            self._out.progress_ts is not None
            or self._out.stream_ts is not None
            or self._stream_starting
            or bool(self._texts)
            or (self._current is not None and bool(self._current.text().strip()))
        )

    def _activity(self) -> None:
        self._activity_timer = None
        streaming = self._native and (self._out.stream_ts is not None or self._stream_starting)
        if streaming and not self._tools and not self._activity_deferred:
            # The answer shows as it is written: the Stop button waits one more delay, so an
            # answer streamed within it costs no extra message (posted, then deleted).
            self._activity_deferred = True
            loop = asyncio.get_running_loop()
            self._activity_timer = loop.call_later(self._options.activity_delay_s, self._activity)
            return
        self._activity_due = True
        self._throttle.request()

    def _cancel_timer(self) -> None:
        for timer in (self._activity_timer, self._working_timer):
            if timer is not None:
                timer.cancel()
        self._activity_timer = self._working_timer = None

    # -- while it works --------------------------------------------------------------------------

    def _text(self) -> str:
        texts = list(self._texts)
        if self._current is not None:
            current = self._current.text()
            if current.strip():
                texts.append(current)
        return blocks.defuse_broadcasts("\n\n".join(text.strip("\n") for text in texts))

    async def _flush(self) -> None:
        """Throttled: bring Slack up to date with the answer so far. After a 429 nothing is
        sent until its Retry-After has passed; then the state of that moment is shown."""
        if self._finishing or self._run_id is None or time.monotonic() < self._quiet_until:
            return
        text = self._text()
        if self._native and text:
            await self._flush_stream(text)
        with_text = not self._native
        tools = list(self._tools.values())
        if not (tools or self._activity_due or (with_text and text.strip())):
            return
        status = self._progress_status(tools)
        body = blocks.progress_message(
            text=text, run_id=self._run_id, tools=tools, status=status, with_text=with_text
        )
        key = (body.text, _fingerprint(body.blocks), _fingerprint(body.attachments))
        if key == self._last_progress:
            return
        if self._out.progress_ts is None:
            ts = await self._post(body, part="progress", progress=True)
            if ts is None:
                return
            self._out.progress_ts = ts
        elif not await self._update(self._out.progress_ts, body, progress=True):
            return
        self._last_progress = key

    def _back_off(self, error: SlackApiError) -> None:
        """A progress write got a 429: skip updates until Retry-After, then show the latest."""
        delay = _retry_after(error)
        self._quiet_until = time.monotonic() + delay
        asyncio.get_running_loop().call_later(delay, self._throttle.request)

    def _progress_status(self, tools: list[blocks.ToolView]) -> str:
        running = [view for view in tools if view.ok is None]
        if running:
            return f"Running {running[-1].label or running[-1].name}…"
        if self._current is not None and self._current.text().strip():
            return "Writing…"
        return "Working…"

    async def _flush_stream(self, text: str) -> None:
        if self._stream_broken:
            return
        if self._out.stream_ts is None:
            chunk = text[:STREAM_LIMIT]
            arguments: dict[str, Any] = {
                "channel": self._channel,
                "thread_ts": self._thread_ts,
                "markdown_text": chunk,
            }
            if not self._channel.startswith("D"):  # Slack needs a recipient in channels
                arguments["recipient_user_id"] = self._user_id
                arguments["recipient_team_id"] = self._team_id
            self._stream_starting = True
            try:
                response = await self._call(
                    self._client.chat_startStream, wait_on_429=False, **arguments
                )
            except SlackApiError as error:
                if _is_rate_limited(error):
                    self._back_off(error)
                    return
                if _error_code(error) in _NO_STREAMING:
                    log.info(
                        "native streaming unavailable (%s); updating a message instead",
                        _error_code(error),
                    )
                    self._features.streaming = False
                self._native = False
                return
            except _TRANSPORT_ERRORS:
                # It may have started: never start another. If it did, the final answer
                # replaces it (chat.update is safe to repeat); else the message is updated.
                log.warning("starting a stream failed in transport; not retried")
                self._native = False
                self._out.stream_ts = await self._find_message(lambda m: m.get("text") == chunk)
                self._stream_broken = True
                return
            finally:
                self._stream_starting = False
            self._out.stream_ts = str(response["ts"])
            self._streamed = chunk
            return
        if not text.startswith(self._streamed):
            return  # the model retried a reply: the final answer sets it right
        new = text[len(self._streamed) : STREAM_LIMIT]
        if not new:
            return
        try:
            await self._call(
                self._client.chat_appendStream,
                wait_on_429=False,
                channel=self._channel,
                ts=self._out.stream_ts,
                markdown_text=new,
            )
        except SlackApiError as error:
            if _is_rate_limited(error):
                self._back_off(error)  # nothing was appended: the next append carries it
                return
            log.warning("appending to the stream failed; the final answer will replace it")
            self._stream_broken = True
            return
        except _TRANSPORT_ERRORS:
            log.warning("appending to the stream failed; the final answer will replace it")
            self._stream_broken = True
            return
        self._streamed += new

    def _want_status(self, status: str) -> None:
        if (
            self._features.status_line
            and not self._status_off
            and not self._finishing
            and self._run_id is not None
        ):
            self._status_wanted = status
            if self._status_allowed:
                self._status_throttle.request()

    async def _flush_status(self) -> None:
        wanted = self._status_wanted
        if wanted == self._status_sent or self._status_off or not self._features.status_line:
            return
        self._status_used = True
        try:
            await self._call(
                self._client.assistant_threads_setStatus,
                idempotent=True,
                channel_id=self._channel,
                thread_ts=self._thread_ts,
                status=wanted,
            )
        except SlackApiError as error:
            log.info("no assistant status line here (%s)", _error_code(error))
            self._status_off = True
            if _error_code(error) in _NO_STATUS_LINE:
                self._features.status_line = False
            return
        except _TRANSPORT_ERRORS:
            return
        self._status_sent = wanted

    # -- notices and files -----------------------------------------------------------------------

    async def _notice(self, notice: Notice) -> None:
        if notice.ack is not None and self._options.reactions and self._message_ts is not None:
            # A steered message: 👀 while queued, ✅ once read; no private note for each.
            await self._react(WORKING_REACTION, add=notice.ack == "queued")
            return await self._react(DONE_REACTION, add=True) if notice.ack == "read" else None
        self._shown_notices.add(notice.text.strip())
        # mrkdwn, escaped: a quoted message cannot mention anyone or @channel.
        line = f"{_NOTICE_MARK[notice.level]} {blocks.escape(notice.text)}"
        if notice.audience is not None:
            user = _user_id(notice.audience)
            try:
                await self._call(
                    self._client.chat_postEphemeral,
                    channel=self._channel,
                    user=user,
                    thread_ts=self._thread_ts,
                    text=blocks.truncate(line, blocks.TEXT_LIMIT),
                )
                return
            except (SlackApiError, *_TRANSPORT_ERRORS) as error:
                if not isinstance(error, SlackApiError):
                    return  # it may have been shown; a private note is not worth a repeat
                log.info(
                    "ephemeral notice refused (%s); addressing it in the thread", _error_code(error)
                )
                line = f"<@{blocks.escape(user)}> {line}"
        body = blocks.MessageBody(
            blocks.truncate(line, blocks.TEXT_LIMIT), [blocks.context_mrkdwn(line)]
        )
        with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
            await self._post(body, part="notice")

    async def _file(self, file: FileOut) -> None:
        attempts = 0
        while True:
            try:
                await self._client.files_upload_v2(
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    filename=file.name,
                    content=file.data,
                    title=file.name,
                )
                return
            except SlackApiError as error:
                if _is_rate_limited(error) and attempts < MAX_RATE_LIMIT_RETRIES:
                    attempts += 1
                    await self._sleep(_retry_after(error))
                    continue
                log.warning("could not upload %s (%s)", file.name, _error_code(error))
            except _TRANSPORT_ERRORS:
                log.warning("uploading %s failed in transport; not retried", file.name)
            break
        failed = f"⚠️ I could not attach {file.name}."
        with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
            await self._post(
                blocks.MessageBody(failed, [blocks.context_block(failed)]), part="notice"
            )

    # -- the end ---------------------------------------------------------------------------------

    async def _finish(self, event: RunFinished) -> None:
        if self._finished:
            return
        self._finished = True
        self._outcome = event.outcome
        self._finishing = True
        self._cancel_timer()
        if self._working_task is not None:  # a 👀 in flight lands before it is taken away
            await self._working_task
        await self._throttle.close()  # an update in flight completes; nothing new starts
        if self._checkpoint is not None:  # the messages posted so far, stored before the end
            await self._checkpoint()
        self._run_id = self._run_id or event.run_id
        body = self._final_text(event)
        error_text = event.error_text
        if error_text is not None and error_text.strip() in self._shown_notices:
            error_text = None  # already said, as a notice
        outcome_text = blocks.outcome_line(event.outcome, error_text, event.reference)
        extras = blocks.final_extras(
            run_id=self._run_id,
            outcome_text=outcome_text,
            feedback=bool(body.strip()) and event.outcome != "interrupted",
            usage=event.usage if self._options.usage_footer and not self._recovered else None,
        )
        try:
            await self._show_final(body, extras)
        finally:
            await self._status_throttle.close()
            await self._clear_status()
            if self._options.reactions and self._message_ts is not None:
                if self._working_shown or self._recovered:  # (an earlier process's 👀)
                    await self._react(WORKING_REACTION, add=False)
                await self._react(_final_reaction(event.outcome), add=True)

    def _final_text(self, event: RunFinished) -> str:
        """The whole answer: what was shown while it streamed, or the runner's final text
        when the surface saw less (a restart, a surface that joined late)."""
        shown = self._text()
        final = blocks.defuse_broadcasts(event.final_text.strip("\n"))
        if not final.strip():
            return shown
        if shown.rstrip().endswith(final.strip()):
            return shown
        return final

    async def _show_final(self, body: str, extras: list[dict[str, Any]]) -> None:
        tools = list(self._tools.values())
        attachments = blocks.tool_attachments(tools) if tools else None
        if len(body) > SPLIT_IN_THREAD_CHARS:  # splitting a long answer takes a while
            parts = await asyncio.to_thread(blocks.answer_parts, body)
        else:
            parts = blocks.answer_parts(body)
        stream_ts = self._out.stream_ts
        progress_ts = self._out.progress_ts
        if self._recovered and progress_ts is None:
            # The process may have died between posting and recording it: look for it.
            progress_ts = self._out.progress_ts = await self._find_posted("progress")

        if stream_ts is not None and not self._recovered:
            if await self._stop_stream(stream_ts, body, extras):
                if progress_ts is not None:
                    await self._finish_progress(progress_ts, attachments)
                elif attachments:  # the run ended before its in-progress message was due
                    await self._post_tools(attachments)
                return
        elif stream_ts is not None:
            # Recovery: end the stream if Slack still keeps it open; a failure is expected.
            with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
                await self._call(self._client.chat_stopStream, channel=self._channel, ts=stream_ts)

        # The first part replaces the in-progress message (or the stream); the rest follow.
        target = stream_ts if stream_ts is not None else progress_ts
        first_attachments = attachments if target == progress_ts else None
        if not parts:
            parts = [""]
        # Recovery: the run that died (or lost its lease to this instance) may have posted
        # parts before its run was closed; they are shown again in place, never twice (one
        # look through the thread for all of them).
        posted = await self._posted_parts() if self._recovered else {}
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            message = blocks.answer_message(
                part,
                extras=extras if last else [],
                attachments=first_attachments if index == 0 else None,
            )
            if index == 0 and target is not None:
                if await self._update(target, message):
                    continue
                if target == stream_ts:  # a half-streamed answer must not stay beside it
                    with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
                        await self._call(
                            self._client.chat_delete,
                            idempotent=True,
                            channel=self._channel,
                            ts=target,
                        )
            earlier = posted.get(f"answer:{index}")
            if earlier is not None and await self._update(earlier, message):
                continue
            await self._post_once(message, part=f"answer:{index}")
        if stream_ts is not None and progress_ts is not None:
            await self._finish_progress(progress_ts, attachments)
        elif stream_ts is not None and attachments:
            await self._post_tools(attachments)

    async def _post_tools(self, attachments: list[dict[str, Any]]) -> None:
        """The tool calls of a streamed answer whose in-progress message was never posted
        (the run ended first): one message with one attachment per call, as it would have
        been left."""
        count = len(self._tools)
        summary = f"Used {count} tool{'s' if count != 1 else ''}."
        body = blocks.MessageBody(summary, [blocks.context_block(summary)], attachments)
        await self._post_once(body, part="tools")

    async def _stop_stream(self, stream_ts: str, body: str, extras: list[dict[str, Any]]) -> bool:
        """Finish the native stream with the rest of the answer; False if the answer must be
        shown another way (too long to stream, the stream broke, or it shows other text)."""
        if self._stream_broken or len(body) > STREAM_LIMIT or not body.startswith(self._streamed):
            with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
                await self._call(self._client.chat_stopStream, channel=self._channel, ts=stream_ts)
            return False
        rest = body[len(self._streamed) :]
        arguments: dict[str, Any] = {"channel": self._channel, "ts": stream_ts}
        if rest:
            arguments["markdown_text"] = rest
        if extras:
            arguments["blocks"] = extras
        try:
            await self._call(self._client.chat_stopStream, idempotent=True, **arguments)
        except (SlackApiError, *_TRANSPORT_ERRORS):
            log.warning("stopping the stream failed; replacing it with the final answer")
            return False
        self._streamed = body
        return True

    async def _finish_progress(self, ts: str, attachments: list[dict[str, Any]] | None) -> None:
        """The in-progress message beside a streamed answer: the Stop button goes, the tool
        calls stay; with no tool calls it has nothing left to say and is deleted."""
        count = len(self._tools)
        if self._recovered:  # (its tool calls are known only to the process that died)
            summary = "Done." if self._outcome == "done" else "Interrupted."
        elif count:
            summary = f"Used {count} tool{'s' if count != 1 else ''}."
        else:
            with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
                await self._call(
                    self._client.chat_delete, idempotent=True, channel=self._channel, ts=ts
                )
                self._out.progress_ts = None
                return
            summary = "Done."
        body = blocks.MessageBody(summary, [blocks.context_block(summary)], attachments)
        await self._update(ts, body)

    async def _clear_status(self) -> None:
        if not self._status_used or self._status_off:
            return
        with contextlib.suppress(SlackApiError, *_TRANSPORT_ERRORS):
            await self._call(
                self._client.assistant_threads_setStatus,
                idempotent=True,
                channel_id=self._channel,
                thread_ts=self._thread_ts,
                status="",
            )

    # -- Slack calls -----------------------------------------------------------------------------

    async def _call(
        self,
        method: Callable[..., Awaitable[Any]],
        *,
        idempotent: bool = False,
        wait_on_429: bool = True,
        **arguments: Any,
    ) -> Any:
        """One Web API call: retried after Retry-After on a 429 (bounded; `wait_on_429`
        False raises it for the caller to skip); after a transport error retried once only
        when repeating it cannot show anything twice."""
        rate_limited = 0
        transport_failures = 0
        while True:
            try:
                return await method(**arguments)
            except SlackApiError as error:
                if (
                    wait_on_429
                    and _is_rate_limited(error)
                    and rate_limited < MAX_RATE_LIMIT_RETRIES
                ):
                    rate_limited += 1
                    await self._sleep(_retry_after(error))
                    continue
                raise
            except _TRANSPORT_ERRORS:
                if idempotent and transport_failures == 0:
                    transport_failures += 1
                    continue
                raise

    def _metadata(self, part: str) -> dict[str, Any]:
        return {
            "event_type": METADATA_EVENT,
            "event_payload": {"run_id": self._run_id or 0, "part": part},
        }

    async def _post(
        self, body: blocks.MessageBody, *, part: str, progress: bool = False
    ) -> str | None:
        """Post a message in the thread; None if Slack refused it. After a transport error
        it is looked for in the thread, never posted again."""
        try:
            response = await self._call(
                self._client.chat_postMessage,
                wait_on_429=not progress,
                channel=self._channel,
                thread_ts=self._thread_ts,
                metadata=self._metadata(part),
                unfurl_links=False,
                unfurl_media=False,
                **body.arguments(),
            )
        except SlackApiError as error:
            if progress and _is_rate_limited(error):
                self._back_off(error)
                return None
            log.warning("posting in %s failed (%s)", self._channel, _error_code(error))
            return None
        except _TRANSPORT_ERRORS:
            # The message may have landed: look for it rather than posting it twice.
            found = await self._find_posted(part)
            if found is None:
                log.warning(
                    "a post in %s failed in transport and is not in the thread", self._channel
                )
            return found
        return str(response["ts"])

    async def _post_once(self, body: blocks.MessageBody, *, part: str) -> str | None:
        """Post a part of the final answer: if the post's fate is unknown and the part is not
        in the thread, post it again (the final answer must not be lost). While Slack answers
        5xx the post is tried again with backoff (looking in the thread first: a failed call
        may have posted it), then reported in the log as undeliverable."""
        for attempt in range(SERVER_ERROR_RETRIES + 1):
            try:
                response = await self._call(
                    self._client.chat_postMessage,
                    channel=self._channel,
                    thread_ts=self._thread_ts,
                    metadata=self._metadata(part),
                    unfurl_links=False,
                    unfurl_media=False,
                    **body.arguments(),
                )
                return str(response["ts"])
            except SlackApiError as error:
                if _is_server_error(error) and attempt < SERVER_ERROR_RETRIES:
                    await self._sleep(SERVER_ERROR_BACKOFF_S * 2**attempt)
                    found = await self._find_posted(part)
                    if found is not None:
                        return found
                    continue
                if _error_code(error) == "invalid_blocks":
                    log.warning("posting the answer failed (invalid_blocks); posting its text")
                    return await self._post_plain(body, part)
                log.warning(
                    "undeliverable: part %s of the answer of run %s in %s (Slack: %s, %d tries)",
                    part,
                    self._run_id,
                    self._channel,
                    _error_code(error),
                    attempt + 1,
                )
                return None
            except _TRANSPORT_ERRORS:
                found = await self._find_posted(part)
                if found is not None:
                    return found
                break
        try:
            response = await self._call(
                self._client.chat_postMessage,
                channel=self._channel,
                thread_ts=self._thread_ts,
                metadata=self._metadata(part),
                **body.arguments(),
            )
            return str(response["ts"])
        except (SlackApiError, *_TRANSPORT_ERRORS):
            log.exception("the final answer could not be posted in %s", self._channel)
            return None

    async def _post_plain(self, body: blocks.MessageBody, part: str) -> str | None:
        """Last resort when Slack refuses the blocks: the text alone."""
        try:
            response = await self._call(
                self._client.chat_postMessage,
                channel=self._channel,
                thread_ts=self._thread_ts,
                metadata=self._metadata(part),
                text=body.text,
            )
            return str(response["ts"])
        except (SlackApiError, *_TRANSPORT_ERRORS):
            return None

    async def _update(self, ts: str, body: blocks.MessageBody, *, progress: bool = False) -> bool:
        """Replace a message (idempotent, so safe to repeat). False if it failed."""
        try:
            await self._call(
                self._client.chat_update,
                idempotent=True,
                wait_on_429=not progress,
                channel=self._channel,
                ts=ts,
                **body.arguments(),
            )
        except SlackApiError as error:
            if progress and _is_rate_limited(error):
                self._back_off(error)
                return False
            log.warning("updating a message in %s failed (%s)", self._channel, _error_code(error))
            return False
        except _TRANSPORT_ERRORS:
            log.warning("updating a message in %s failed in transport", self._channel)
            return False
        return True

    async def _posted_parts(self) -> dict[str, str]:
        """The ts of each part of this run's answer already in the thread, by part."""
        found: dict[str, str] = {}

        def ours(message: dict[str, Any]) -> bool:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            part = payload.get("part")
            if (
                metadata.get("event_type") == METADATA_EVENT
                and payload.get("run_id") == (self._run_id or 0)
                and isinstance(part, str)
                and part.startswith("answer:")
            ):
                found[part] = str(message["ts"])  # the newest wins, as in `_find_posted`
            return False

        await self._find_message(ours)
        return found

    async def _find_posted(self, part: str) -> str | None:
        """The ts of this run's message `part` if it is in the thread."""

        def ours(message: dict[str, Any]) -> bool:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            return (
                metadata.get("event_type") == METADATA_EVENT
                and payload.get("run_id") == (self._run_id or 0)
                and payload.get("part") == part
            )

        return await self._find_message(ours)

    async def _find_message(self, matches: Callable[[dict[str, Any]], bool]) -> str | None:
        """The ts of the newest bot message in the thread that `matches` (bounded search)."""
        cursor: str | None = None
        found: str | None = None
        for _ in range(LOOKUP_PAGES):
            try:
                page = await self._call(
                    self._client.conversations_replies,
                    idempotent=True,
                    channel=self._channel,
                    ts=self._thread_ts,
                    cursor=cursor,
                    limit=200,
                    include_all_metadata=True,
                )
            except (SlackApiError, *_TRANSPORT_ERRORS):
                return found
            for message in page.get("messages") or []:
                if isinstance(message, dict) and message.get("bot_id") and matches(message):
                    found = str(message["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return found
        return found

    async def _react(self, name: str, *, add: bool) -> None:
        method = self._client.reactions_add if add else self._client.reactions_remove
        try:
            await self._call(
                method,
                idempotent=True,
                channel=self._channel,
                timestamp=self._message_ts,
                name=name,
            )
        except SlackApiError as error:
            if _error_code(error) not in ("already_reacted", "no_reaction"):
                log.info("reaction %s failed (%s)", name, _error_code(error))
        except _TRANSPORT_ERRORS:
            log.info("reaction %s failed in transport", name)


class SlackSurfaces:
    """A SurfaceFactory for Slack refs (recovery reports an interrupted run where it was)."""

    def __init__(self, client: AsyncWebClient, *, options: SurfaceOptions | None = None) -> None:
        self._client = client
        self._options = options

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> SlackSurface | None:
        return SlackSurface.from_ref(self._client, ref, options=self._options)


_NOTICE_MARK = {"info": "ℹ️", "warning": "⚠️", "error": "❌"}


def _final_reaction(outcome: str) -> str:
    if outcome == "done":
        return DONE_REACTION
    if outcome == "aborted":
        return STOPPED_REACTION
    return FAILED_REACTION


def _user_id(author: Author) -> str:
    """Slack's user id of an author (`U…`; a prefixed id keeps only its last part)."""
    return author.id.rsplit(":", 1)[-1]


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _error_code(error: SlackApiError) -> str:
    try:
        return str(error.response.get("error") or "unknown")
    except Exception:
        return "unknown"


def _is_server_error(error: SlackApiError) -> bool:
    try:
        return int(error.response.status_code) >= 500
    except (AttributeError, TypeError, ValueError):
        return False


def _is_rate_limited(error: SlackApiError) -> bool:
    try:
        return int(error.response.status_code) == 429
    except (AttributeError, TypeError, ValueError):
        return False


def _retry_after(error: SlackApiError) -> float:
    try:
        value = error.response.headers.get("Retry-After") or error.response.headers.get(
            "retry-after"
        )
        seconds = float(value) if value is not None else 1.0
    except (AttributeError, TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _fingerprint(value: Any) -> str:
    return repr(value)
