"""One model reply's tool calls, run: checked, executed with their deadlines, and turned into
results whatever happens.

Owns: `ToolCalls` (a run's tools by name; a batch prepared, passed through the caller's gate,
started, run concurrently unless any tool is `sequential`, and settled after a stop so every
started call has a result), the gate's contract (`ToolGate`: the hook before a batch executes,
which allows, denies with a reason, or makes the batch wait; `GateCall`, `Allow`, `Deny`), the
refusal of calls cut off by the output limit, and the wording of tool errors for the model
(unknown tool, invalid arguments, a raising tool, a timeout, a denial). The turn loop around it
is core.loop's.

Must not: import anything of ours outside `core`; raise for anything a tool does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from pydantic import ValidationError

from core.events import AgentEvent, ToolExecutionEnd, ToolExecutionStart, ToolExecutionUpdate
from core.messages import Author, Text, ToolCall, ToolResultMessage
from core.tools import AnyTool, CancelSignal, ToolContext, ToolError, ToolResult

# The loop's own logger: what a tool does wrong is logged where it always was.
log = logging.getLogger("core.loop")

LENGTH_TEXT = (
    "Your reply hit the output token limit before this tool call was complete, so it was not "
    "executed. Issue the call again, with smaller arguments if they were long (for example, "
    "write a large file in several parts)."
)
MAX_LABEL_CHARS = 120
CANCELLED_TOOL_TEXT = "The run was stopped before this tool finished; its outcome is unknown."

DENIED_DETAILS_REASON = "denied"

Runnable = tuple[ToolCall, AnyTool, Any]  # a call, its tool, its validated parameters
# A call with its tool and validated parameters, or the result that already refuses it.
Prepared = tuple[ToolCall, tuple[AnyTool, Any] | ToolResultMessage]


@dataclass(slots=True, frozen=True)
class GateCall:
    """A call the gate decides on: it names an available tool and its arguments are valid.
    `label` is the tool's own description of it (what `ToolExecutionStart` will carry)."""

    call: ToolCall
    label: str


@dataclass(slots=True, frozen=True)
class Allow:
    """The call runs."""


@dataclass(slots=True, frozen=True)
class Deny:
    """The call does not run; `reason` is what the model reads as its (error) result."""

    reason: str


Verdict: TypeAlias = Allow | Deny
# The hook before a batch executes (pi's `beforeToolCall`): one verdict per call, in order.
# It may take its time (a person deciding); a stop meanwhile cancels it. It must not raise: a
# gate that does is logged and its batch denied, never run unchecked.
ToolGate: TypeAlias = Callable[[list[GateCall]], Awaitable[list[Verdict]]]
GATE_FAILED_TEXT = "This tool call was not run: its approval check failed."


class CallSettings(Protocol):
    """What each call's `ToolContext` is given, read at each call (core.loop's `LoopConfig`)."""

    workspace: Path
    caller: Author | None
    conversation_key: str | None


class ToolCalls:
    """A run's tools, and how one batch of calls is run; every event goes to `emit`."""

    def __init__(
        self,
        tools: Sequence[AnyTool],
        *,
        signal: CancelSignal,
        settings: CallSettings,
        emit: Callable[[AgentEvent | None], None],
    ) -> None:
        self.tools: dict[str, AnyTool] = {tool.name: tool for tool in tools}
        self.signal = signal
        self.settings = settings
        self.emit = emit

    def refuse_cut_off(self, calls: list[ToolCall]) -> list[ToolResultMessage]:
        """Results for the calls of a reply cut off by the output limit: none is executed."""
        return self.refuse_all(calls, LENGTH_TEXT, {"reason": "length"})

    def prepare(self, calls: list[ToolCall]) -> list[Prepared]:
        """Each call with its tool and validated parameters, or the result refusing it
        (unknown tool, invalid arguments). Nothing is announced yet."""
        return [(call, self._prepare(call)) for call in calls]

    @staticmethod
    def gate_calls(prepared: list[Prepared]) -> list[GateCall]:
        """The calls a gate decides on: those not refused already."""
        return [
            GateCall(call, _label(*ready))
            for call, ready in prepared
            if not isinstance(ready, ToolResultMessage)
        ]

    async def ask_gate(self, gate: ToolGate, prepared: list[Prepared]) -> dict[str, str]:
        """The gate's denials by call id (an empty dict: every call may run). A cancel while
        it waits propagates to the caller."""
        asked = self.gate_calls(prepared)
        if not asked:
            return {}
        try:
            verdicts = await gate(asked)
            if len(verdicts) != len(asked):
                raise ValueError(f"{len(verdicts)} verdicts for {len(asked)} calls")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the tool gate failed; its batch is denied")
            return {ask.call.id: GATE_FAILED_TEXT for ask in asked}
        return {
            ask.call.id: verdict.reason
            for ask, verdict in zip(asked, verdicts, strict=True)
            if isinstance(verdict, Deny)
        }

    def refuse_all(self, calls: list[ToolCall], text: str, details: Any) -> list[ToolResultMessage]:
        """Every call announced and ended with the same error result (none runs)."""
        results = []
        for call in calls:
            self.emit(ToolExecutionStart(call.id, call.name, call.arguments, call.name))
            result = _error_result(call, text, details)
            self.emit(ToolExecutionEnd(call.id, call.name, result, 0.0))
            results.append(result)
        return results

    def start(
        self, prepared: list[Prepared], denied: Mapping[str, str] | None = None
    ) -> tuple[dict[str, ToolResultMessage], list[Runnable]]:
        """Announce every call; the results of those refused already (unknown tool, invalid
        arguments, denied by the gate) by call id, and the calls left to run."""
        results: dict[str, ToolResultMessage] = {}
        runnable: list[Runnable] = []
        for call, ready in prepared:
            label = call.name if isinstance(ready, ToolResultMessage) else _label(*ready)
            reason = denied.get(call.id) if denied else None
            if reason is not None:
                ready = _error_result(call, reason, {"reason": DENIED_DETAILS_REASON})
            self.emit(ToolExecutionStart(call.id, call.name, call.arguments, label))
            if isinstance(ready, ToolResultMessage):
                self.emit(ToolExecutionEnd(call.id, call.name, ready, 0.0))
                results[call.id] = ready
            else:
                runnable.append((call, ready[0], ready[1]))
        return results, runnable

    async def run(
        self,
        runnable: list[Runnable],
        tasks: dict[str, asyncio.Task[ToolResultMessage]],
        results: dict[str, ToolResultMessage],
    ) -> None:
        """Run the calls, concurrently unless any tool is `sequential`; their tasks and results
        are filled in as they go, so a stop meanwhile knows what started and what ended."""
        sequential = any(tool.execution_mode == "sequential" for _, tool, _ in runnable)
        if sequential:
            for call, tool, params in runnable:
                tasks[call.id] = asyncio.ensure_future(self._run_tool(call, tool, params))
                results[call.id] = await tasks[call.id]
        else:
            for call, tool, params in runnable:
                tasks[call.id] = asyncio.ensure_future(self._run_tool(call, tool, params))
            if tasks:
                await asyncio.wait(tasks.values())
            for call_id, done in tasks.items():
                results[call_id] = done.result()

    def settle_stopped(
        self,
        calls: list[ToolCall],
        results: dict[str, ToolResultMessage],
        tasks: dict[str, asyncio.Task[ToolResultMessage]],
    ) -> list[ToolResultMessage]:
        """After a stop: a result for every call, in the order the model wrote them (what
        finished keeps its own, the rest say they were stopped)."""
        ordered = []
        for call in calls:
            result = results.get(call.id)
            ran = tasks.get(call.id)
            if result is None and ran is not None and ran.done() and not ran.cancelled():
                result = ran.result()
            if result is None:
                result = _error_result(call, CANCELLED_TOOL_TEXT, {"cancelled": True})
                self.emit(ToolExecutionEnd(call.id, call.name, result, 0.0))
            ordered.append(result)
        return ordered

    @staticmethod
    async def cancel(tasks: list[asyncio.Task[ToolResultMessage]]) -> None:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _prepare(self, call: ToolCall) -> tuple[AnyTool, Any] | ToolResultMessage:
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            return _error_result(
                call,
                f"Tool '{call.name}' is not available here (no such tool, or it is not "
                f"enabled in this conversation). Available tools: {available}.",
                {"reason": "unknown_tool"},
            )
        try:
            params = tool.parameters.model_validate(call.arguments)
        except ValidationError as exc:
            return _error_result(
                call, _describe_invalid_arguments(call, exc), {"reason": "invalid_arguments"}
            )
        return tool, params

    async def _run_tool(self, call: ToolCall, tool: AnyTool, params: Any) -> ToolResultMessage:
        def on_update(partial: ToolResult) -> None:
            self.emit(ToolExecutionUpdate(call.id, call.name, partial))

        ctx = ToolContext(
            call_id=call.id,
            workspace=self.settings.workspace,
            signal=self.signal,
            on_update=on_update,
            caller=self.settings.caller,
            conversation_key=self.settings.conversation_key,
        )
        started = time.monotonic()
        is_error = False
        details: Any = None
        try:
            async with asyncio.timeout(tool.timeout_s) as deadline:
                outcome = await tool.execute(call.id, params, ctx)
            content, details = outcome.content, outcome.details
        except ToolError as exc:
            is_error, details = True, exc.details
            content = exc.content or [Text(text=exc.message)]
        except TimeoutError as exc:
            is_error = True
            if deadline.expired():
                text = f"Tool '{call.name}' timed out after {tool.timeout_s:g} s and was stopped."
                details = {"reason": "timeout", "timeout_s": tool.timeout_s}
            else:
                text = f"Tool '{call.name}' failed: TimeoutError: {exc}"
            content = [Text(text=text)]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("tool %s raised", call.name, exc_info=True)
            is_error = True
            content = [Text(text=f"Tool '{call.name}' failed: {type(exc).__name__}: {exc}")]
        result = ToolResultMessage(
            tool_call_id=call.id,
            tool_name=call.name,
            content=content,
            details=details,
            is_error=is_error,
        )
        self.emit(ToolExecutionEnd(call.id, call.name, result, time.monotonic() - started))
        return result


def _label(tool: AnyTool, params: Any) -> str:
    """The tool's own one-line description of a call, bounded; its name if that fails."""
    try:
        text = " ".join(tool.summarize(params).split())
    except Exception:
        log.warning("tool %s could not describe a call", tool.name, exc_info=True)
        return tool.name
    if not text:
        return tool.name
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _error_result(call: ToolCall, text: str, details: Any = None) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[Text(text=text)],
        details=details,
        is_error=True,
    )


def _describe_invalid_arguments(call: ToolCall, exc: ValidationError) -> str:
    lines = [f"Invalid arguments for tool '{call.name}':"]
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        lines.append(f"  - {where}: {error['msg']}")
    echoed = json.dumps(call.arguments, ensure_ascii=False, default=str)
    if len(echoed) > 2000:
        echoed = echoed[:2000] + "…"
    lines.append(f"Arguments received: {echoed}")
    return "\n".join(lines)
