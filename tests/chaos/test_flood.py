"""Flood, scaled down for CI (issue 13; the full 2,000 events run in benchmarks/chaos_faults.py):
many threads at once into the assembled Slack app, a tenth of the events delivered twice —
every distinct message answered exactly once, in order within its thread."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.flood_kit import flood


async def test_a_flood_with_repeats_is_answered_exactly_once_in_thread_order(
    tmp_path: Path,
) -> None:
    result = await flood(tmp_path, threads=40, per_thread=5, seconds=2.0, channels=4)
    assert result.statuses == {200: result.deliveries}
    assert result.deliveries > result.sent  # some were delivered twice
    assert result.missing == 0
    assert result.duplicated == 0
    assert result.answered_once == result.sent == 200
    assert result.out_of_order_threads == 0
