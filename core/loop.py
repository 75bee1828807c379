"""The agent loop: pi's ReAct loop, in Python.

Owns: `run_agent`, `AgentContext`, `LoopConfig` and the turn loop: model calls, steering taken
between batches, follow-ups, cancellation, the turn cap. A batch of tool calls is run by
`core.tool_calls`; `RunControl` (steering, follow-ups and cancellation fed by the caller while a
run works) is `core.run_control`'s. Both are re-exported here. The event order is drawn in
`core.events`.

Rules (docs/architecture.md, "The agent loop"):
- Unknown tool, invalid arguments, a raising tool, a tool timeout: error observations for the
  model, never exceptions.
- Tool calls of one assistant message run concurrently unless any is `sequential`; results are
  appended in the order the model wrote the calls.
- A reply cut off by the output limit (`length`) does not execute its tool calls; each gets an
  error result asking the model to re-issue it.
- Cancellation is cooperative and immediate: the model stream is closed, running tools are
  cancelled, every started call gets a result, and the run ends with an `aborted` assistant
  message. Nothing is left half-written. A reply the model itself ends `aborted` ends the run
  `aborted` too, with the model's reason (or `MODEL_ABORTED_TEXT`): an end always says why.
- Steering messages are injected after the current tool batch (never skipping calls the model
  made), before the next model call; follow-ups queued when the loop would stop start a turn.
- A turn cap ends a runaway run with a clear message.
- The gate (`LoopConfig.before_tool_calls`, pi's `beforeToolCall`) sees a batch's valid calls
  before any runs and allows, denies (the reason is the call's result) or waits; the loop knows
  nothing of who decides. None set: not a single await more. A stop while it waits ends the
  run like a stop during the tools.
- A resumed run (`AgentContext.resume`: a stored reply whose calls never ran, e.g. they were
  waiting for approval when the process restarted) runs those calls first, without asking the
  model again.

Per-turn cost: the history is repaired once when the run starts and then only appended to; a
turn never re-validates, re-repairs or re-converts earlier messages. Each model call does get a
snapshot of the message list (a copy of n references, since a model may keep its request), so
that one step is O(n) in the history's length, though tiny (tens of microseconds at 10,000
messages; `benchmarks/loop_overhead.py` measures a whole turn at 10, 1,000 and 10,000).

Steering is handed back, never lost: a message taken from the control but not delivered (the
turn cap, a stop) is listed in `AgentEnd.undelivered`. A message counts as delivered when its
`message_end` is emitted; the caller records history in that order (docs/architecture.md).

Must not: import anything of ours outside `core`; raise for anything a model or tool does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from core.events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    EndReason,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TurnEnd,
    TurnStart,
)
from core.history import is_replayable, repair_history
from core.messages import (
    AssistantMessage,
    Author,
    Message,
    ToolCall,
    ToolResultMessage,
)
from core.models.base import (
    Model,
    ModelRequest,
    StreamEnd,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from core.run_control import ABORTED_TEXT, RunControl
from core.tool_calls import (
    CANCELLED_TOOL_TEXT,
    LENGTH_TEXT,
    MAX_LABEL_CHARS,
    Allow,
    Deny,
    GateCall,
    ToolCalls,
    ToolGate,
    Verdict,
)
from core.tools import AnyTool

__all__ = [
    "ABORTED_TEXT",
    "CANCELLED_TOOL_TEXT",
    "DEFAULT_MAX_TURNS",
    "LENGTH_TEXT",
    "MAX_LABEL_CHARS",
    "MODEL_ABORTED_TEXT",
    "AgentContext",
    "Allow",
    "Deny",
    "GateCall",
    "LoopConfig",
    "RunControl",
    "ToolGate",
    "Verdict",
    "run_agent",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 50
# A reply the model itself ended `aborted` (no stop asked for) and left unexplained.
MODEL_ABORTED_TEXT = "The model stopped the reply before finishing."


@dataclass(slots=True)
class AgentContext:
    """What a run starts from: the system prompt, the history and the tools. `resume`: a
    reply already stored (not in `messages`) whose tool calls have no result yet; the run
    executes them first instead of asking the model."""

    system_prompt: str
    messages: list[Message]
    tools: Sequence[AnyTool] = ()
    resume: AssistantMessage | None = None


@dataclass(slots=True)
class LoopConfig:
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int | None = None
    workspace: Path = field(default_factory=Path.cwd)
    caller: Author | None = None
    conversation_key: str | None = None
    # Asked before a batch's calls run (see the rules above); None costs nothing.
    before_tool_calls: ToolGate | None = None


async def run_agent(
    context: AgentContext,
    model: Model,
    *,
    control: RunControl | None = None,
    config: LoopConfig | None = None,
) -> AsyncIterator[AgentEvent]:
    """Run the loop and yield its events. Always ends with exactly one `AgentEnd`.

    The run works in its own task and does not wait for the consumer: events arrive in order,
    possibly a little after they happened. Closing the iterator early cancels the run.
    """
    control = control or RunControl()
    queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
    run = _Run(context, model, control, config or LoopConfig(), queue.put_nowait)
    task = asyncio.create_task(run.execute(), name="agent-loop")
    # However the run task ends, the consumer below is released.
    task.add_done_callback(lambda _: queue.put_nowait(None))
    control._attach(task)
    try:
        while True:
            event = await queue.get()
            if event is None:
                break
            yield event
    finally:
        if not task.done():
            control.cancel("The run was abandoned by its caller.")
            with suppress(asyncio.CancelledError):
                await task
    # A bug in the loop itself (never a model or tool failure) surfaces here.
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


class _Aborted(Exception):
    """Raised inside a run once its cancellation has been handled and recorded."""


class _Run:
    def __init__(
        self,
        context: AgentContext,
        model: Model,
        control: RunControl,
        config: LoopConfig,
        emit: Callable[[AgentEvent | None], None],
    ) -> None:
        self.context = context
        self.model = model
        self.control = control
        self.config = config
        self.emit = emit
        self.tool_calls = ToolCalls(
            context.tools,
            signal=control.signal,
            settings=config,
            emit=emit,
        )
        self.tool_specs = [tool.spec() for tool in context.tools]
        # What the next model call sends: repaired once here, then only appended to.
        self.sendable: list[Message] = repair_history(context.messages)
        self.added: list[Message] = []
        # Messages taken from the control but never delivered (turn cap, stop): handed back.
        self.undelivered: list[Message] = []

    # -- the run ---------------------------------------------------------------------------

    async def execute(self) -> None:
        self.emit(AgentStart())
        reason: EndReason = "stop"
        error: str | None = None
        try:
            reason, error = await self._turns()
        except _Aborted:
            reason, error = "aborted", self.control.signal.reason
        except asyncio.CancelledError:
            reason, error = "aborted", self.control.signal.reason
            if not self._our_cancel():
                raise
            # Cancelled between phases: nothing is half-done, just record the abort.
            self._finish_aborted()
        finally:
            self.emit(
                AgentEnd(
                    messages=self.added,
                    reason=reason,
                    error_message=error,
                    undelivered=self.undelivered,
                )
            )
            self.emit(None)

    async def _turns(self) -> tuple[EndReason, str | None]:
        pending: list[Message] = []
        turn = 0
        while True:
            if turn >= self.config.max_turns:
                # Steering taken after the last allowed turn goes back to the caller.
                self.undelivered = pending
                return "turn_limit", (
                    f"I stopped after {self.config.max_turns} steps in one go (the turn limit). "
                    "Tell me to continue if you want me to keep going."
                )
            turn += 1
            self.emit(TurnStart(turn=turn))
            if self.control.cancelled:
                self.undelivered = pending  # a stopped run delivers nothing more
                self._finish_aborted()
                raise _Aborted
            for message in pending:
                self._add(message)
            pending = []
            resumed, self.context.resume = self.context.resume, None
            if resumed is not None:
                reply = resumed  # stored already: neither announced nor asked for again
                self.sendable.append(reply)
            else:
                reply = await self._stream_reply()
                self._add(reply, started=True)
            if reply.stop_reason in ("error", "aborted"):
                self.emit(TurnEnd(turn=turn, message=reply, tool_results=[]))
                if reply.stop_reason == "error":
                    return "error", reply.error_message
                if self.control.cancelled:
                    raise _Aborted  # the caller's stop: its reason explains the end
                # The model ended it on its own: the run still says why.
                return "aborted", reply.error_message or MODEL_ABORTED_TEXT
            calls = reply.tool_calls()
            results: list[ToolResultMessage] = []
            if calls:
                if reply.stop_reason == "length":
                    results = self._refuse_cut_off_calls(calls)
                else:
                    results = await self._execute_batch(calls, turn, reply)
                for result in results:
                    self._add(result)
            self.emit(TurnEnd(turn=turn, message=reply, tool_results=results))
            pending = self.control.take_steering()
            if pending or calls:
                continue
            pending = self.control.take_follow_ups()
            if not pending:
                return "stop", None

    def _add(self, message: Message, *, started: bool = False) -> None:
        """Record a completed message and announce it (`started`: its start was announced)."""
        if not started:
            self.emit(MessageStart(message=message))
        self.added.append(message)
        if is_replayable(message):
            self.sendable.append(message)
        self.emit(MessageEnd(message=message))

    def _our_cancel(self) -> bool:
        """True if a CancelledError came from `RunControl.cancel`; clears it so cleanup can
        await. Any other cancellation (the process shutting down) is left to propagate."""
        if not self.control.cancelled:
            return False
        task = asyncio.current_task()
        if task is not None:
            while task.cancelling():
                task.uncancel()
        return True

    def _finish_aborted(self, partial: AssistantMessage | None = None) -> None:
        """End the run with an `aborted` assistant message (the partial reply, if any)."""
        message = partial or AssistantMessage(
            model=self.model.info.id, provider=self.model.info.provider
        )
        message.stop_reason = "aborted"
        message.error_kind = "aborted"
        message.error_message = self.control.signal.reason or ABORTED_TEXT
        self._add(message, started=partial is not None)

    # -- the model -------------------------------------------------------------------------

    async def _stream_reply(self) -> AssistantMessage:
        request = ModelRequest(
            system_prompt=self.context.system_prompt,
            messages=list(self.sendable),
            tools=self.tool_specs,
            max_tokens=self.config.max_tokens,
        )
        partial: AssistantMessage | None = None
        final: AssistantMessage | None = None
        try:
            async with aclosing(self.model.stream(request)) as stream:  # type: ignore[type-var]
                async for event in stream:
                    match event:
                        case StreamStart():
                            if partial is None:
                                partial = event.partial
                                self.emit(MessageStart(message=partial))
                        case TextDelta() | ThinkingDelta() | ToolCallDelta():
                            if partial is None:
                                partial = event.partial
                                self.emit(MessageStart(message=partial))
                            self.emit(MessageUpdate(message=event.partial, delta=event))
                        case StreamEnd():
                            final = event.message
                        case _:
                            assert_never(event)
        except asyncio.CancelledError:
            if not self._our_cancel():
                raise
            self._finish_aborted(partial.model_copy(deep=True) if partial else None)
            raise _Aborted from None
        except Exception as exc:  # a Model that broke its contract; still not our caller's problem
            log.exception("model %s raised instead of returning an error", self.model.info.id)
            final = self._error_reply(f"The model failed unexpectedly ({type(exc).__name__}).")
        if final is None:
            final = self._error_reply("The model's reply ended without a final message.")
        if partial is None:
            self.emit(MessageStart(message=final))
        return final

    def _error_reply(self, text: str) -> AssistantMessage:
        return AssistantMessage(
            model=self.model.info.id,
            provider=self.model.info.provider,
            stop_reason="error",
            error_kind="other",
            error_message=text,
        )

    # -- tools -----------------------------------------------------------------------------

    def _refuse_cut_off_calls(self, calls: list[ToolCall]) -> list[ToolResultMessage]:
        return self.tool_calls.refuse_cut_off(calls)

    async def _execute_batch(
        self, calls: list[ToolCall], turn: int, reply: AssistantMessage
    ) -> list[ToolResultMessage]:
        prepared = self.tool_calls.prepare(calls)
        denied: dict[str, str] = {}
        gate = self.config.before_tool_calls
        if gate is not None:
            try:
                denied = await self.tool_calls.ask_gate(gate, prepared)
            except asyncio.CancelledError:
                if not self._our_cancel():
                    raise
                # Stopped while waiting for the gate: nothing ran, every call says so.
                ordered = self.tool_calls.refuse_all(
                    calls, CANCELLED_TOOL_TEXT, {"cancelled": True}
                )
                for result in ordered:
                    self._add(result)
                self.emit(TurnEnd(turn=turn, message=reply, tool_results=ordered))
                self._finish_aborted()
                raise _Aborted from None
        results, runnable = self.tool_calls.start(prepared, denied)
        tasks: dict[str, asyncio.Task[ToolResultMessage]] = {}
        try:
            await self.tool_calls.run(runnable, tasks, results)
        except asyncio.CancelledError:
            await self.tool_calls.cancel(list(tasks.values()))
            if not self._our_cancel():
                raise
            ordered = self.tool_calls.settle_stopped(calls, results, tasks)
            for result in ordered:
                self._add(result)
            self.emit(TurnEnd(turn=turn, message=reply, tool_results=ordered))
            self._finish_aborted()
            raise _Aborted from None
        return [results[call.id] for call in calls]
