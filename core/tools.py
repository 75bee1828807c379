"""The tool contract: what a tool is, what it receives, what it returns.

Owns: `AgentTool` (name, label, description, pydantic `parameters`, `execute`, execution mode,
timeout), `ToolContext`, `ToolResult` and `ToolError`. The JSON schema a model sees is generated
from the parameters model; arguments are validated against the same model.

A tool signals failure by raising. `ToolError` carries a message written for the model (and
optionally details for people); any other exception is an unexpected failure. The loop turns
every failure into an `is_error` tool result; nothing a tool raises escapes the loop.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import marshal
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from core.messages import Author, Text, ToolResultContent
from core.models.base import ToolSpec

ExecutionMode: TypeAlias = Literal["parallel", "sequential"]

DEFAULT_TOOL_TIMEOUT_S = 120.0


class ToolResult(BaseModel):
    """`content` is what the model reads; `details` is for people and is never sent."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    content: list[ToolResultContent] = Field(default_factory=list)
    details: Any = None

    @classmethod
    def text(cls, text: str, details: Any = None) -> ToolResult:
        return cls(content=[Text(text=text)], details=details)


class ToolError(Exception):
    """A failure the tool expected, told to the model as written.

    `details` reaches people (e.g. the exit code and output of a failed command); `content`,
    when given, replaces the message as what the model reads.
    """

    def __init__(
        self,
        message: str,
        *,
        details: Any = None,
        content: list[ToolResultContent] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.content = content


class CancelSignal:
    """A cooperative cancellation flag shared by a run and its tools."""

    __slots__ = ("_callbacks", "_event", "reason")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` (once, synchronously) when the signal is set; returns a function
        that unregisters it. A hot path's alternative to a task awaiting `wait()`: nothing
        is scheduled unless the signal is set. Already set: called at once."""
        if self._event.is_set():
            callback()
            return _nothing
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


def _nothing() -> None:
    return None


def _ignore_update(_partial: ToolResult) -> None:
    return None


@dataclass(slots=True)
class ToolContext:
    """What a running tool may know and use.

    `workspace` is the directory the tool works in and may not leave; `caller` is the person
    whose message started the run; `on_update` publishes partial results to people while the
    tool works; `signal` is set when the run is cancelled (the tool's task is also cancelled).
    """

    call_id: str
    workspace: Path
    signal: CancelSignal = field(default_factory=CancelSignal)
    on_update: Callable[[ToolResult], None] = _ignore_update
    caller: Author | None = None
    conversation_key: str | None = None


P = TypeVar("P", bound=BaseModel)


class AgentTool(ABC, Generic[P]):
    """A capability the model can call.

    Subclasses set the class attributes and implement `execute`. `description` is written for
    the model: it decides how well the model uses the tool.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[type[BaseModel]]
    execution_mode: ClassVar[ExecutionMode] = "parallel"
    timeout_s: ClassVar[float] = DEFAULT_TOOL_TIMEOUT_S

    @abstractmethod
    async def execute(self, call_id: str, params: P, ctx: ToolContext) -> ToolResult:
        """Do the work. Raise `ToolError` for failures the model should read as written."""

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=tool_input_schema(self.parameters),
        )

    def summarize(self, params: P) -> str:
        """A short label for a call, shown to people as it starts ("Read README.md", "grep TODO
        in src/"); the loop puts it on `ToolExecutionStart`, kept to one line and bounded, so
        no surface needs the toolset to describe a call. Tools override it."""
        first = next(iter(params.model_dump(exclude_none=True).values()), None)
        return f"{self.label} {first}" if isinstance(first, str | int | float) else self.label


def tool_input_schema(parameters: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema a model sees for a parameters model, without pydantic's titles noise.

    Generating it costs most of a millisecond and every run asks for every tool's: it is made
    once per parameters model, and each caller gets its own copy (through `marshal`: a JSON
    schema is plain dicts, lists and scalars, and it copies them 4x faster than `deepcopy`,
    which was 8 % of a burst's CPU)."""
    copied: dict[str, Any] = marshal.loads(marshal.dumps(_schema_of(parameters)))
    return copied


@functools.lru_cache(maxsize=256)
def _schema_of(parameters: type[BaseModel]) -> dict[str, Any]:
    schema = parameters.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


AnyTool: TypeAlias = AgentTool[Any]
