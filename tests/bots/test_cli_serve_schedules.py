"""`teammate serve` runs scheduled work: a schedule that fell due many times while no process
ran runs once after start-up, as a new message in its channel with the answer in its thread.
The real command in a subprocess against FakeSlack."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.sqlite import SqliteStore
from tests.bots.test_cli import TIMEOUT_S
from tests.bots.test_cli_serve import slack_env, start_serve, stop_serve
from tests.fakes.slack_server import FakeSlack


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def test_work_due_during_downtime_runs_once_after_start(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    channel_key = f"slack:{fake_slack.team_id}:C1"
    async with SqliteStore.open(data_dir / "teammate.db") as store:
        await store.add_schedule(
            channel_key,
            prompt="Check the deploy queue",
            cron="*/5 * * * *",
            timezone="UTC",
            next_run_at=time.time() - 3 * 3600,  # due 36 times over while nothing ran
            by_id="UA",
            by_name="ua",
            max_active=10,
        )

    def heads(fake: FakeSlack) -> list[dict[str, object]]:
        return [
            m
            for m in fake.messages.get("C1", [])
            if str(m.get("text", "")).startswith("⏰ Scheduled by <@UA>")
        ]

    process = await start_serve(slack_env(tmp_path, data_dir, fake_slack), tmp_path)
    try:
        await fake_slack.wait_for(lambda fake: len(heads(fake)) == 1, TIMEOUT_S)
        (head,) = heads(fake_slack)
        ts = str(head["ts"])
        await fake_slack.wait_for(
            lambda fake: "scripted model" in json.dumps(fake.bot_replies("C1", ts)), TIMEOUT_S
        )
    finally:
        err = await stop_serve(process)
    assert process.returncode == 0, err
    assert len(heads(fake_slack)) == 1
    async with SqliteStore.open(data_dir / "teammate.db") as store:
        (schedule,) = await store.schedules(channel_key)
    assert schedule.next_run_at is not None and schedule.next_run_at > time.time() - 60
