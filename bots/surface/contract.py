"""The Surface contract: how a run looks on a platform.

Owns: the runner's own events (`RunStarted`, `Notice`, `FileOut`, `RunFinished`), the
`SurfaceEvent` union a surface receives, the `Surface` protocol, and `SurfaceFactory`, through
which an adapter gives the runner surfaces (for a new message, or for reporting on an old run
after a restart).

A surface owns presentation: streaming text, compact tool activity, the final answer, errors.
The runner feeds each surface through its own queue and task (`bots.surface.feed`), so a slow
surface (a platform backing off from a 429) never delays saving messages or other
conversations; `emit` may take its time, but must never lose the final answer. A surface that
raises is logged by the runner and never stops a run.

What one surface sees (docs/architecture.md, "The event order"):
- the surface of a run: `run_started`, the loop's events, `notice`s and `file_out`s, then
  `run_finished`, then `close()`;
- the surface of a message steered into a running run: a private `notice` that it was queued,
  then one that it was delivered (or that it will not be answered), then `close()`;
- a message that arrives between runs, or is left over when a run ends (the turn cap, a
  message just too late), starts a follow-up run: its surface is that run's surface (its own
  `run_started` ... `run_finished`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from core.events import AgentEvent
from core.messages import Author, Usage
from storage.base import RunOutcome as RunOutcome  # re-exported: adapters need not import storage

NoticeLevel: TypeAlias = Literal["info", "warning", "error"]


@dataclass(slots=True, frozen=True)
class RunStarted:
    conversation_key: str
    run_id: int
    author: Author | None
    type: Literal["run_started"] = "run_started"


@dataclass(slots=True, frozen=True)
class Notice:
    """Something people should know that is not part of the answer (a refusal, a repair, an
    acknowledgement). `audience` None: everyone in the conversation; an `Author`: only that
    person, privately where the platform can (an ephemeral message), else addressed to them."""

    text: str
    level: NoticeLevel = "info"
    audience: Author | None = None
    type: Literal["notice"] = "notice"
    # An acknowledgement of a message steered into a running answer: queued, then read. A
    # platform may show it quietly (Slack: a reaction on the message) instead of the text.
    ack: Literal["queued", "read"] | None = None


@dataclass(slots=True, frozen=True)
class FileOut:
    """A file the assistant produced, to attach to the answer. `data` is the file as the tool
    left it, read by the runner without following links (a surface never reopens it by name);
    `path` is where it is, relative to the channel's workspace; `name` is what people see."""

    path: str
    name: str
    mime_type: str
    data: bytes = field(repr=False)
    type: Literal["file_out"] = "file_out"


@dataclass(slots=True, frozen=True)
class RunFinished:
    """A run ended. `error_text` is written for people; `reference` ties it to the log."""

    conversation_key: str
    run_id: int
    outcome: RunOutcome
    usage: Usage
    final_text: str
    error_text: str | None = None
    reference: str | None = None
    type: Literal["run_finished"] = "run_finished"


@dataclass(slots=True, frozen=True)
class ApprovalView:
    """One call of a request: what will run (`preview`: Markdown, secrets masked)."""

    approval_id: int
    tool_name: str
    label: str
    preview: str


@dataclass(slots=True, frozen=True)
class ApprovalRequested:
    """A run waits for a person's yes before the calls run (bots.features.approvals). The
    surface shows the request with Approve and Deny buttons (and "approve the rest of this
    run" for the same tool) per call, and says who it is `waiting_for`."""

    conversation_key: str
    run_id: int
    requests: tuple[ApprovalView, ...]
    waiting_for: str
    timeout_s: float
    type: Literal["approval_requested"] = "approval_requested"


@dataclass(slots=True, frozen=True)
class ApprovalDecided:
    """A request was decided (`state`: approved, denied, timed_out, cancelled) by `by_name`
    (None: nobody, the clock or a stop); `text` says so for people."""

    run_id: int
    approval_id: int
    state: str
    by_name: str | None
    text: str
    type: Literal["approval_decided"] = "approval_decided"


SurfaceEvent: TypeAlias = (
    AgentEvent | RunStarted | Notice | FileOut | RunFinished | ApprovalRequested | ApprovalDecided
)


class Surface(Protocol):
    @property
    def ref(self) -> dict[str, Any]:
        """Where this surface shows things (JSON-able), stored with a run so that a restarted
        process can report on it in the same place. It may change after the first post (a
        Slack message ts, a Discord message id): the runner stores the new value with the run
        after each event the surface has shown."""
        ...

    async def emit(self, event: SurfaceEvent) -> None: ...

    async def close(self) -> None:
        """Flush everything pending (the final answer above all)."""
        ...


@runtime_checkable
class Checkpointed(Protocol):
    """A surface that has its ref stored before it shows a run's end.

    The feed records a surface's ref after each event; a message posted meanwhile (a stream
    started by a throttled update) is stored only after the next event, the end. Killed while
    showing the end, the run's stored ref would not name that message, and recovery would post
    the answer again beside it. `checkpoint()` stores the current ref now."""

    def set_checkpoint(self, checkpoint: Callable[[], Awaitable[None]]) -> None: ...


class SurfaceFactory(Protocol):
    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        """A surface for an earlier run's `ref`, or None if this adapter can't show there."""
        ...
