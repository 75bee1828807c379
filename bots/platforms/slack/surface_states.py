"""The phases of a Slack surface and every transition between them.

Owns: `Phase` (where a `SlackSurface` is in its life), `TRANSITIONS` (every legal move), and
`next_phase`, the one decision for the three paths that race to show a run first (`Race`):
the working delay's timer, the activity delay's timer and the throttled flush (which starts
the stream or posts the in-progress message). The diagram is in `SlackSurface`'s docstring
(`bots.platforms.slack.surface`), which performs the transitions (`_enter`) and their effects.

Must not: do IO, or know more of a surface than the facts `next_phase` is handed.
"""

from __future__ import annotations

from enum import Enum


class Phase(Enum):
    IDLE = "idle"  # no run: a steered message's surface, or a recovered one before its end
    QUIET = "quiet"  # the run started; nothing of it shows (a quick answer ends from here)
    WORKING_SHOWN = "working shown"  # the working delay passed with nothing showing: 👀
    STREAMING = "streaming"  # the answer streams natively; no in-progress message yet
    STREAM_HELD = "stream held"  # the Stop button held back one more activity delay
    ACTIVITY_DUE = "activity due"  # the in-progress message is due, even with nothing in it
    ACTIVITY_POSTED = "activity posted"  # the in-progress message (Stop, tool calls) is up
    FINISHING = "finishing"  # run_finished: the end is being shown; nothing else is written
    DONE = "done"  # the end is shown
    CLOSED = "closed"


# A run in progress: the racing paths may still show something of it.
RUNNING = frozenset(
    {
        Phase.QUIET,
        Phase.WORKING_SHOWN,
        Phase.STREAMING,
        Phase.STREAM_HELD,
        Phase.ACTIVITY_DUE,
        Phase.ACTIVITY_POSTED,
    }
)
# The in-progress message is shown even with nothing in it but the Stop button.
SHOWS_ACTIVITY = frozenset({Phase.ACTIVITY_DUE, Phase.ACTIVITY_POSTED})

# Every legal transition (staying in a phase is always legal and changes nothing).
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.IDLE: frozenset({Phase.QUIET, Phase.FINISHING, Phase.CLOSED}),
    Phase.QUIET: frozenset(
        {
            Phase.WORKING_SHOWN,
            Phase.STREAMING,
            Phase.ACTIVITY_DUE,
            Phase.ACTIVITY_POSTED,
            Phase.FINISHING,
        }
    ),
    Phase.WORKING_SHOWN: frozenset(
        {Phase.STREAMING, Phase.ACTIVITY_DUE, Phase.ACTIVITY_POSTED, Phase.FINISHING}
    ),
    Phase.STREAMING: frozenset(
        {Phase.STREAM_HELD, Phase.ACTIVITY_DUE, Phase.ACTIVITY_POSTED, Phase.FINISHING}
    ),
    Phase.STREAM_HELD: frozenset({Phase.ACTIVITY_DUE, Phase.ACTIVITY_POSTED, Phase.FINISHING}),
    Phase.ACTIVITY_DUE: frozenset({Phase.ACTIVITY_POSTED, Phase.FINISHING}),
    Phase.ACTIVITY_POSTED: frozenset({Phase.FINISHING}),
    Phase.FINISHING: frozenset({Phase.DONE}),
    Phase.DONE: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}


class Race(Enum):
    """The three paths that race to show a run first, as they arrive (the flush in three
    ways: it starts the stream, posts the in-progress message, or makes a stream that showed
    narration the in-progress message)."""

    WORKING_DELAY = "the working delay passed with nothing showing"
    ACTIVITY_DELAY = "the activity delay passed"
    STREAM_STARTING = "the flush starts the native stream"
    PROGRESS_POSTED = "the flush posted the in-progress message"
    STREAM_ADOPTED = "the flush made the stream's message, narration, the in-progress message"


def next_phase(phase: Phase, path: Race, *, streams_alone: bool) -> Phase:
    """Where `path` arriving in `phase` leads. `streams_alone`: the answer streams natively
    (started, or starting) and has no tool calls. Whatever arrives after the end began
    changes nothing: the end won the race."""
    if phase not in RUNNING:
        return phase
    match path:
        case Race.WORKING_DELAY:
            return Phase.WORKING_SHOWN if phase is Phase.QUIET else phase
        case Race.ACTIVITY_DELAY:
            if phase is Phase.STREAMING and streams_alone:
                # The answer shows as it is written: the Stop button waits one more delay,
                # so an answer streamed within it costs no extra message (posted, deleted).
                return Phase.STREAM_HELD
            return phase if phase in SHOWS_ACTIVITY else Phase.ACTIVITY_DUE
        case Race.STREAM_STARTING:
            return Phase.STREAMING if phase in (Phase.QUIET, Phase.WORKING_SHOWN) else phase
        case Race.PROGRESS_POSTED | Race.STREAM_ADOPTED:
            return Phase.ACTIVITY_POSTED
