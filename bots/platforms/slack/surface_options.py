"""What a Slack surface is told and what it has posted.

Owns: `SlackFeatures` (what this workspace supports, learnt once and shared by every surface
of an app), `SurfaceOptions` (the delays and switches of one app's surfaces) and `Outbox` (the
messages a surface has posted so far: the part of its `ref` that changes).
"""

from __future__ import annotations

from dataclasses import dataclass


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
class Outbox:
    """What the surface has posted so far (its `ref`)."""

    progress_ts: str | None = None  # the in-progress message (Stop button, tool calls)
    stream_ts: str | None = None  # the natively streamed answer
