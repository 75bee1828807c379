"""The trace recorder: each run's steps, stored as the run goes, batched, never in its way.

Owns: `TraceRecorder`, a `bots.surface.feed.FeedTap` every feed of the runner tells of the
events it is given (the same ones a surface shows) and of the moments its surface showed a
run's first post and its end; plus `stopped` (who stopped a run: the runner's `stop`) and
`compacted` (a run's compaction). Each becomes a `storage.base.TraceEvent` shaped by
`bots.traces.shaping` (secrets masked, sizes bounded) and waits in a bounded queue that a
background task writes in batches (`store.append_trace_events`). What a feed tells is shaped
there, once per batch, not on the answer's path: `put` only notes the event's run, order,
time and what to shape from (the event's message, arguments and result, which the loop no
longer changes once it told of them; held until the next batch). The same task lets search
catch up with the messages runs appended (`store.catch_up_search`, every two seconds at most). A
full queue drops events with a counted warning: recording never blocks or slows an answer,
and a store that fails costs the trace, never the run. The process's metrics
(`bots.traces.metrics`) are counted from the same events.

Timings: a model call is timed from its turn's start to its reply's end as handed to the
surface (that includes storing the reply: about a millisecond); a tool call by the loop's own
`duration_s`; the first post and the answer from the run's start, on this process's monotonic
clock, both in the one `answer` event written when the end was shown. A run that simply
answered is two rows (its model call, its answer): the loop's end is written only when it was
not a plain stop.

Must not: await anything in `put`, `shown`, `stopped` or `compacted`; raise into a feed; keep
state of more than `MAX_RUNS` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from bots.surface.contract import RunFinished, RunStarted, SurfaceEvent
from bots.surface.feed import ShownMoment
from bots.traces.shaping import Shaper
from core.events import AgentEnd, MessageEnd, ToolExecutionEnd, ToolExecutionStart, TurnStart
from core.messages import AssistantMessage, Author, UserMessage
from storage.base import Compaction, ConversationStore, TraceEvent, TraceKind

if TYPE_CHECKING:
    from bots.traces.metrics import TeammateMetrics

__all__ = ["MAX_PENDING", "MAX_RUNS", "TraceRecorder"]

log = logging.getLogger(__name__)

MAX_PENDING = 20_000  # events waiting to be written; more are dropped and counted
MAX_RUNS = 10_000  # runs whose state is kept (their start, calls in flight)
BATCH = 500  # events per write
MAX_TOOLS_IN_FLIGHT = 256  # per run
INDEX_BATCH = 500  # messages indexed for search per transaction, in the background


class _Noted(NamedTuple):
    """An event as `put` notes it: its data, or how to shape it when the batch is written."""

    run_id: int
    kind: TraceKind
    at: float
    ms: float | None
    seq: int
    data: dict[str, Any] | Callable[[], dict[str, Any]]


@dataclass(slots=True)
class _RunTrace:
    """What the recorder remembers of one run while it goes."""

    started: float  # monotonic
    platform: str
    first_post_ms: float | None = None
    seq: int = 0
    turn: int | None = None
    turn_started: float | None = None
    tools: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # label, args

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class TraceRecorder:
    """Records runs' traces for one runner. `close()` writes what waits, then stops."""

    def __init__(
        self,
        store: ConversationStore,
        *,
        secrets: Iterable[str] = (),
        metrics: TeammateMetrics | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_pending: int = MAX_PENDING,
        flush_delay_s: float = 1.0,
        index_every_s: float = 2.0,
    ) -> None:
        self.metrics = metrics
        self.dropped = 0  # events dropped because the queue was full or a write failed
        self._store = store
        self._shaper = Shaper(secrets)
        self._clock = clock
        self._monotonic = monotonic
        self._max_pending = max_pending
        self._flush_delay_s = flush_delay_s
        self._index_every_s = index_every_s
        self._indexed_at = monotonic()
        self._pending: deque[_Noted] = deque()
        self._runs: OrderedDict[int, _RunTrace] = OrderedDict()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()  # nothing waits and nothing is being written
        self._idle.set()
        self._closed = False
        self._closing = asyncio.Event()  # set by close(): the writer stops gathering

    # --- what feeds and the runner tell it (never blocking) --------------------------------

    def put(self, run_id: int | None, event: SurfaceEvent) -> None:
        if run_id is None or self._closed:
            return
        if isinstance(event, RunStarted):
            self._start(run_id, event.conversation_key)
            return
        run = self._runs.get(run_id)
        if run is None:
            return  # a run this process did not start (recovery shows others' ends)
        match event:
            case TurnStart():
                run.turn, run.turn_started = event.turn, self._monotonic()
            case MessageEnd(message=AssistantMessage() as reply):
                took = None if run.turn_started is None else self._ms_since(run.turn_started)
                shape = partial(self._shaper.model_call, reply, run.turn)
                self._add(run_id, run, "model_call", took, shape)
            case MessageEnd(message=UserMessage() as steered):
                self._add(run_id, run, "steer", None, partial(self._shaper.steer, steered))
            case ToolExecutionStart():
                if len(run.tools) < MAX_TOOLS_IN_FLIGHT:
                    run.tools[event.tool_call_id] = (event.label, event.arguments)
            case ToolExecutionEnd():
                self._tool_ended(run_id, run, event)
            case AgentEnd() if event.reason != "stop" or event.error_message:
                data = {"reason": event.reason, "message": self._shaper.short(event.error_message)}
                self._add(run_id, run, "end", None, data)
            case RunFinished():
                self._finished(run_id, run, event)
            case _:
                pass

    def shown(self, run_id: int, moment: ShownMoment) -> None:
        run = self._runs.get(run_id)
        if run is None or self._closed:
            return
        if moment == "first_post":  # written with the answer: one row per run for both
            run.first_post_ms = self._ms_since(run.started)
            return
        data = {} if run.first_post_ms is None else {"first_post_ms": run.first_post_ms}
        self._add(run_id, run, "answer", self._ms_since(run.started), data)
        self._runs.pop(run_id, None)

    def stopped(self, run_id: int | None, by: Author | None, *, scope: str) -> None:
        """Someone asked the run to stop (`scope`: "run" for its own Stop, "conversation"
        for a stop of everything queued too)."""
        run = None if run_id is None else self._runs.get(run_id)
        if run_id is None or run is None or self._closed:
            return
        data = {
            "by_id": by.id[:200] if by else None,
            "by": by.name[:200] if by else None,
            "scope": scope,
        }
        self._add(run_id, run, "stop", None, data)

    def compacted(self, run_id: int, compaction: Compaction | None, *, forced: bool) -> None:
        run = self._runs.get(run_id)
        if run is None or self._closed:
            return
        data: dict[str, Any] = {"forced": forced}
        if compaction is not None:
            data["up_to_seq"] = compaction.up_to_seq
            data["summary_chars"] = len(compaction.summary)
        self._add(run_id, run, "compaction", None, data)

    # --- writing ---------------------------------------------------------------------------

    async def close(self, timeout_s: float = 5.0) -> None:
        """Write what waits (bounded by `timeout_s`), then stop the writer."""
        self._closed = True
        self._closing.set()
        self._wake.set()
        writer = self._writer
        if writer is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(writer), timeout_s)
        if not writer.done():
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        if self._pending:
            self._lose(len(self._pending), "the recorder closed before they were written")
            self._pending.clear()
        self._idle.set()

    async def flushed(self) -> None:
        """Return once every event recorded so far was written (or lost): for tests."""
        await self._idle.wait()

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            with contextlib.suppress(TimeoutError):  # a burst gathers into one batch
                await asyncio.wait_for(self._closing.wait(), self._flush_delay_s)
            self._wake.clear()
            while self._pending:
                size = min(BATCH, len(self._pending))
                batch = self._shaped([self._pending.popleft() for _ in range(size)])
                try:
                    await self._store.append_trace_events(batch)
                except Exception as exc:
                    self._lose(len(batch), f"the store refused them ({type(exc).__name__})")
            await self._index_search()
            if not self._wake.is_set():
                self._idle.set()
            if self._closed:
                return

    def _shaped(self, noted: list[_Noted]) -> list[TraceEvent]:
        """The batch's events with their data shaped (an event whose shaping fails is lost,
        counted, never the batch)."""
        events: list[TraceEvent] = []
        for run_id, kind, at, ms, seq, data in noted:
            if callable(data):
                try:
                    data = data()
                except Exception as exc:
                    self._lose(1, f"they could not be shaped ({type(exc).__name__})")
                    continue
            events.append(TraceEvent(run_id, kind, at, ms, data, seq))
        return events

    async def _index_search(self) -> None:
        """Let search catch up with the messages runs appended (SQLite indexes them in
        batches, off the answer's path): at most once every `index_every_s`."""
        if not self._closed and self._monotonic() - self._indexed_at < self._index_every_s:
            return
        self._indexed_at = self._monotonic()
        try:
            await self._store.catch_up_search(limit=INDEX_BATCH)
        except Exception:
            log.exception("could not index new messages for search")

    # --- helpers ---------------------------------------------------------------------------

    def _start(self, run_id: int, conversation_key: str) -> None:
        platform = conversation_key.split(":", 1)[0][:32] or "unknown"
        self._runs[run_id] = _RunTrace(started=self._monotonic(), platform=platform)
        while len(self._runs) > MAX_RUNS:
            self._runs.popitem(last=False)

    def _tool_ended(self, run_id: int, run: _RunTrace, event: ToolExecutionEnd) -> None:
        label, arguments = run.tools.pop(event.tool_call_id, (event.tool_name, {}))
        shape = partial(self._shaper.tool_call, event.tool_name, label, arguments, event.result)
        self._add(run_id, run, "tool_call", event.duration_s * 1000.0, shape)
        if self.metrics is not None:
            self.metrics.tool_called(event.tool_name, failed=event.is_error)

    def _finished(self, run_id: int, run: _RunTrace, event: RunFinished) -> None:
        if event.reference is not None or event.outcome == "error":
            data = {"reference": event.reference, "text": self._shaper.short(event.error_text)}
            self._add(run_id, run, "error", None, data)
        if self.metrics is not None:
            seconds = self._ms_since(run.started) / 1000.0
            self.metrics.run_finished(run.platform, event.outcome, seconds, event.usage)

    def _add(
        self,
        run_id: int,
        run: _RunTrace,
        kind: TraceKind,
        ms: float | None,
        data: dict[str, Any] | Callable[[], dict[str, Any]],
    ) -> None:
        if len(self._pending) >= self._max_pending:
            self._lose(1, "the queue is full")
            return
        self._pending.append(_Noted(run_id, kind, self._clock(), ms, run.next_seq(), data))
        if not self._wake.is_set():
            self._wake.set()
            self._idle.clear()
            if self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(
                    self._write_forever(), name="trace-recorder"
                )

    def _ms_since(self, start: float) -> float:
        return max(0.0, (self._monotonic() - start) * 1000.0)

    def _lose(self, count: int, why: str) -> None:
        first = self.dropped == 0
        self.dropped += count
        if self.metrics is not None:
            self.metrics.traces_dropped(count)
        if first or self.dropped % 1000 < count:  # the first loss, then every thousand
            log.warning("%s trace events not recorded: %s (%s in all)", count, why, self.dropped)
