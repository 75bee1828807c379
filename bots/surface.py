"""The Surface contract: how a run looks on a platform.

Owns: the runner's own events (`RunStarted`, `Notice`, `RunFinished`), the `SurfaceEvent`
union a surface receives, the `Surface` protocol, and `SurfaceFactory`, through which an
adapter gives the runner surfaces (for a new message, or for reporting on an old run after a
restart).

A surface owns presentation: streaming text, compact tool activity, the final answer, errors.
`emit` must return quickly (coalesce and throttle in the background) and must never lose the
final answer. A surface that raises is logged by the runner and never stops a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from core.events import AgentEvent
from core.messages import Author, Usage
from storage.base import RunOutcome

NoticeLevel: TypeAlias = Literal["info", "warning", "error"]


@dataclass(slots=True, frozen=True)
class RunStarted:
    conversation_key: str
    run_id: int
    author: Author | None
    type: Literal["run_started"] = "run_started"


@dataclass(slots=True, frozen=True)
class Notice:
    """Something people should know that is not part of the answer (a refusal, a repair)."""

    text: str
    level: NoticeLevel = "info"
    type: Literal["notice"] = "notice"


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


SurfaceEvent: TypeAlias = AgentEvent | RunStarted | Notice | RunFinished


class Surface(Protocol):
    @property
    def ref(self) -> dict[str, Any]:
        """Where this surface shows things (JSON-able), stored with a run so that a restarted
        process can report on it in the same place."""
        ...

    async def emit(self, event: SurfaceEvent) -> None: ...

    async def close(self) -> None:
        """Flush everything pending (the final answer above all)."""
        ...


class SurfaceFactory(Protocol):
    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        """A surface for an earlier run's `ref`, or None if this adapter can't show there."""
        ...
