"""The Slack surface's state machine: every decision of `next_phase` is a legal transition,
the race's outcomes in the order production's delays give them, and the phases a run passes
through on the fake Slack."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack.surface_states import RUNNING, TRANSITIONS, Phase, Race, next_phase
from tests.bots.platforms.slack.surface_script import (
    Reply,
    finished,
    make_surface,
    started,
    tool_start,
)
from tests.fakes.slack_server import FakeSlack


def test_every_decision_is_a_legal_transition() -> None:
    for phase, path, alone in itertools.product(Phase, Race, (False, True)):
        after = next_phase(phase, path, streams_alone=alone)
        assert after is phase or after in TRANSITIONS[phase], (phase, path, alone)


def test_after_the_end_began_no_path_changes_anything() -> None:
    for phase, path in itertools.product(set(Phase) - RUNNING, Race):
        assert next_phase(phase, path, streams_alone=True) is phase


def test_a_stream_that_showed_narration_becomes_the_in_progress_message() -> None:
    for phase in (Phase.STREAMING, Phase.STREAM_HELD):
        assert next_phase(phase, Race.STREAM_ADOPTED, streams_alone=False) is (
            Phase.ACTIVITY_POSTED
        )
        assert Phase.ACTIVITY_POSTED in TRANSITIONS[phase]


@pytest.mark.parametrize(
    ("phase", "alone", "expected"),
    [
        (Phase.QUIET, False, Phase.ACTIVITY_DUE),
        (Phase.WORKING_SHOWN, False, Phase.ACTIVITY_DUE),
        (Phase.STREAMING, True, Phase.STREAM_HELD),  # held back once
        (Phase.STREAMING, False, Phase.ACTIVITY_DUE),  # a tool call, or the stream fell back
        (Phase.STREAM_HELD, True, Phase.ACTIVITY_DUE),  # not twice
        (Phase.ACTIVITY_POSTED, True, Phase.ACTIVITY_POSTED),
    ],
)
def test_the_activity_delay(phase: Phase, alone: bool, expected: Phase) -> None:
    assert next_phase(phase, Race.ACTIVITY_DELAY, streams_alone=alone) is expected


def test_the_stream_starts_from_a_quiet_run_only() -> None:
    for phase in (Phase.QUIET, Phase.WORKING_SHOWN):
        assert next_phase(phase, Race.STREAM_STARTING, streams_alone=False) is Phase.STREAMING
    for phase in (Phase.ACTIVITY_DUE, Phase.ACTIVITY_POSTED):  # the Stop message came first
        assert next_phase(phase, Race.STREAM_STARTING, streams_alone=False) is phase


async def test_an_illegal_transition_is_logged_and_refused(
    fake_slack: FakeSlack, slack_client: AsyncWebClient, caplog: pytest.LogCaptureFixture
) -> None:
    surface, _question = make_surface(slack_client, fake_slack)
    with caplog.at_level(logging.ERROR, logger="bots.platforms.slack.surface"):
        surface._enter(Phase.DONE, "a test")
    assert surface.phase is Phase.IDLE
    assert "no transition" in caplog.text


def transitions_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The transitions one surface logged, as "from → to"."""
    return [
        record.getMessage().split(": ", 1)[1].split(" (")[0]
        for record in caplog.records
        if record.name == "bots.platforms.slack.surface" and "→" in record.getMessage()
    ]


async def test_a_slow_streamed_answer_with_a_tool_call(
    fake_slack: FakeSlack, slack_client: AsyncWebClient, caplog: pytest.LogCaptureFixture
) -> None:
    surface, _question = make_surface(slack_client, fake_slack, streaming=True)
    with caplog.at_level(logging.DEBUG, logger="bots.platforms.slack.surface"):
        await surface.emit(started())  # working delay 0: slow from the start, 👀 at once
        reply = Reply()
        await surface.emit(reply.text("Looking"))
        while surface.ref["stream_ts"] is None:  # noqa: ASYNC110 (the surface reads the answer)
            await asyncio.sleep(0.01)
        await surface.emit(tool_start("t1", "grep", "Search", pattern="x"))
        while surface.ref["progress_ts"] is None:  # noqa: ASYNC110 (the surface reads the answer)
            await asyncio.sleep(0.01)
        await surface.emit(reply.end())
        await surface.emit(finished("Looking"))
        await surface.close()
    assert surface.phase is Phase.CLOSED
    assert transitions_logged(caplog) == [
        "idle → quiet",
        "quiet → working shown",
        "working shown → streaming",
        "streaming → activity posted",
        "activity posted → finishing",
        "finishing → done",
        "done → closed",
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_steered_messages_surface_goes_from_idle_to_closed(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    surface, _question = make_surface(slack_client, fake_slack)
    await surface.close()
    assert surface.phase is Phase.CLOSED
