"""Fencing (issue 24, R3): an instance paused past its lease must not keep working on a
conversation another instance took over. Two runners on one PostgreSQL database; A is "paused"
inside a tool call (its lease heartbeat frozen, as a SIGSTOPped process's is), B takes over,
repairs A's run, answers; then A's tool returns. Nothing of A may land or show after that."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.runner import QUEUED_TEXT
from core.models.scripted import Reply, ScriptedModel, call
from storage.base import RunRecord
from storage.postgres import PostgresStore
from tests.bots.runner_helpers import BOB, KEY, incoming
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.storage.test_instances_runner import history, make_runner, said, started

LIMIT_S = 30.0  # a hang guard, not a speed check
TTL_S = 2.0  # short, so B may take over soon; long enough for a loaded machine's heartbeats


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=TTL_S) as a,
        PostgresStore.open(pg_url, lease_ttl_s=TTL_S) as b,
    ):
        yield a, b


async def freeze_heartbeat(store: PostgresStore) -> None:
    """What SIGSTOP does to an instance's lease: nothing renews it any more (the task stays
    in place, done, so no acquire starts another)."""
    beat = store._instances._heartbeat
    assert beat is not None
    beat.cancel()
    await asyncio.gather(beat, return_exceptions=True)


async def taken_over(runner_b: object, recover: object) -> list[RunRecord]:
    """B's takeover sweep, run until A's lease has expired by the database's clock."""
    for _ in range(int(LIMIT_S / 0.05)):
        recovered: list[RunRecord] = await recover()  # type: ignore[operator]
        if recovered:
            return recovered
        await asyncio.sleep(0.05)
    raise AssertionError("B never took the conversation over")


async def test_an_instance_paused_in_a_tool_past_its_lease_does_nothing_after_the_takeover(
    stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="A's late answer")])
    model_b = ScriptedModel([Reply(text="B's answer")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate]))
    b = await started(make_runner(stores[1], tmp_path / "b", model_b, [gate], RecordingSurfaces()))
    try:
        ada = RecordingSurface("ada")
        await a.submit(incoming("run the migration"), ada)
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
        await freeze_heartbeat(stores[0])  # A is paused inside the tool call

        bob = RecordingSurface("bob")
        await b.submit(incoming("are you there?", author=BOB), bob)
        await bob.wait_for(lambda s: any(n.text == QUEUED_TEXT for n in s.notices()), LIMIT_S)
        [interrupted] = await taken_over(b, b.recover)
        assert interrupted.outcome == "interrupted"
        await asyncio.wait_for(b.wait(KEY), LIMIT_S)
        before = [said(m) for m in await history(stores[1])]
        assert before[-2:] == ["are you there?", "B's answer"]
        shown_before = list(ada.events)

        gate.opened.set()  # A resumes: its tool call returns
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        assert [said(m) for m in await history(stores[1])] == before  # nothing of A landed
        assert len(model_a.requests) == 1  # no model call after the takeover (so no tool)
        assert ada.events == shown_before  # nothing more shown by A
        # A's run stays as B closed it (the first finish wins: this returns it unchanged).
        assert (await stores[1].finish_run(interrupted.id, "error")).outcome == "interrupted"
        assert await stores[1].running_runs() == []
    finally:
        gate.opened.set()
        await a.close()
        await b.close()
