"""Crash anywhere, the CI-sized part: the real `teammate slack --http` SIGKILLed at seeded
moments of an answer and restarted (`tests/chaos/crash_harness.py` says how and what is
checked); `benchmarks/chaos.py` does the same 50+ times per backend, every phase.

CI kills once per moment, each moment once (a process start is the cost, so no repeats
here): on SQLite the final stream, the tool, the model request after it and the end of the
answer being posted, in one rig. The ack-to-accept window has its own test
(test_slack_ack_window.py), as has a Discord `/ask` killed after its defer
(test_discord_ask_crash.py). Three PostgreSQL instances taking a killed one's conversation
over are in CI as tests/bots/platforms/slack/test_e2e_scale_out.py (killed inside a tool call); this
file's PostgreSQL run is opt-in (`TEAMMATE_CHAOS_LONG=1`), like the benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import processes
from tests.chaos.crash_harness import CrashReport, Phase, crash_runs
from tests.storage import pg


@pytest.fixture(scope="module")
def pg_server() -> Iterator[pg.PgServer | None]:
    with pg.server() as found:
        yield found


def check(report: CrashReport, phases: list[Phase]) -> None:
    described = "\n".join(
        f"run {r.run} {r.phase} ({r.hit}): {r.problem or 'ok'}" for r in report.runs
    )
    assert [r.phase for r in report.runs] == phases
    assert all(r.hit for r in report.runs), f"a kill missed its moment\n{described}"
    assert all(r.survived for r in report.runs), described
    assert report.lost == report.duplicates == 0
    assert report.announced_once == report.interrupted


async def test_one_process_on_sqlite_survives_kills_at_seeded_moments() -> None:
    # The posting kill lands while the end of the answer is being shown (chat.stopStream). The
    # run used to be closed in the store before its end was shown: killed then, nobody showed
    # it (the thread kept a half stream, with no answer and no notice). Now the run is closed
    # only once its end is shown, and recovery shows an answer that was complete in history.
    plan: list[Phase] = ["final_stream", "tool", "between", "posting"]
    report = await crash_runs("sqlite", 4, seed=29, plan=plan, posting=("chat.stopStream", False))
    check(report, plan)
    assert not report.runs[3].interrupted  # the posting kill: the answer itself, not a notice


@pytest.mark.skipif(not processes.adopt_orphans(), reason="finding orphans needs Linux")
async def test_a_kill_that_never_fires_is_counted_missed_and_starts_no_second_process() -> None:
    # No answer deletes a message: this kill's moment never comes, the answer finishes first.
    # Such a run used to "restart" the live process: a second one on the same data directory
    # (two live processes on one database, not a crash), the first's handle overwritten, so
    # it was never stopped and outlived the harness.
    report = await crash_runs(
        "sqlite", 1, seed=29, plan=["posting"], posting=("chat.delete", False)
    )

    [run] = report.runs
    assert run.hit is None and run.missed and not run.survived, run.problem
    assert run.problem.startswith("missed: the answer finished before the kill")
    assert run.follow_up_answered and run.lost == run.duplicates == 0
    assert report.missed == 1 and report.phases() == {"posting (missed)": 1}
    left = {
        pid for pid in processes.descendants() if "bots.cli slack" in processes.command_line(pid)
    }
    assert not processes.still_running(left, grace_s=5.0), processes.describe(left)


@pytest.mark.skipif(
    os.environ.get("TEAMMATE_CHAOS_LONG") != "1",
    reason="opt-in (TEAMMATE_CHAOS_LONG=1): the takeover is in CI as test_e2e_scale_out.py",
)
async def test_three_instances_on_postgresql_take_over_a_killed_one(
    pg_server: pg.PgServer | None,
) -> None:
    if pg_server is None:
        pytest.skip(f"PostgreSQL unavailable: {pg.unavailable_reason}")
    schema = await pg_server.create_schema("chaos")
    try:
        report = await crash_runs(
            "postgres", 1, seed=24, database_url=pg_server.schema_url(schema), plan=["between"]
        )
    finally:
        await pg_server.drop_schema(schema)
    check(report, ["between"])
