"""Crash anywhere, the CI-sized part: the real `teammate slack --http` SIGKILLed at seeded
moments of an answer and restarted (`tests/chaos/crash_harness.py` says how and what is
checked); `benchmarks/chaos.py` does the same 50+ times per backend."""

from __future__ import annotations

from tests.chaos.crash_harness import RunResult, crash_runs


def describe(results: list[RunResult]) -> str:
    return "\n".join(f"run {r.run} {r.phase} ({r.hit}): {r.problem or 'ok'}" for r in results)


async def test_sqlite_one_process_survives_kills_at_seeded_moments() -> None:
    report = await crash_runs("sqlite", 6, seed=13)
    assert all(r.survived for r in report.runs), describe(report.runs)
    assert report.lost == report.duplicates == 0
    assert report.announced_once == report.interrupted
