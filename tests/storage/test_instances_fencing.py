"""Fencing (issue 24, R3): an instance paused past its lease must not keep working on a
conversation another instance took over. Two runners on one PostgreSQL database; A is "paused"
inside a tool call (its lease heartbeat frozen, as a SIGSTOPped process's is), B takes over,
repairs A's run, answers; then A's tool returns. Nothing of A may land or show after that."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bots import compaction
from bots.runner import QUEUED_TEXT
from bots.settings import CompactionSettings
from core.messages import AssistantMessage, Text
from core.models.scripted import Reply, ScriptedModel, call
from storage.base import Fence, FencedOut, RunRecord
from storage.postgres import PostgresStore
from tests.bots.runner_helpers import BOB, CHANNEL, KEY, incoming
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.storage.test_instances_runner import (
    history,
    incoming_message,
    make_runner,
    said,
    started,
)

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


async def test_a_lease_the_heartbeat_finds_lost_stops_the_run_inside_its_tool_quietly(
    stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="never")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate]))
    try:
        ada = RecordingSurface("ada")
        await a.submit(incoming("run the migration"), ada)
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
        await ada.wait_for(lambda shown: shown.tool_starts(), LIMIT_S)
        shown_before = list(ada.events)
        conversation = await stores[1].get_conversation(KEY)
        assert conversation is not None
        # Someone else holds it now (as after a takeover A slept through): A's next renewal
        # does not find it, and reports it lost.
        await stores[1]._pool.execute(
            "UPDATE conversation_leases SET holder = 'elsewhere', epoch = nextval('lease_epochs')"
        )
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        assert not gate.opened.is_set()  # the tool call was cancelled, not waited for
        assert len(model_a.requests) == 1
        assert ada.events == shown_before  # no "aborted", no "error": nothing at all
        assert [r.conversation_id for r in await stores[1].running_runs()] == [conversation.id]
        assert [said(m) for m in await history(stores[1])] == ["run the migration", ""]
    finally:
        gate.opened.set()
        await a.close()


# --- the store: every write of a run is fenced with its lease ---------------------------------


@dataclass
class Lapsed:
    """A held the conversation (its run started, a second item pending); its lease expired
    (the heartbeat frozen) and B took the conversation over."""

    a: PostgresStore
    b: PostgresStore
    conversation_id: int
    run_id: int
    item_id: int
    fence: Fence  # A's, from before the takeover


@pytest.fixture
async def lapsed(pg_url: str) -> AsyncIterator[Lapsed]:
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=0.5) as a,
        PostgresStore.open(pg_url, lease_ttl_s=TTL_S) as b,
    ):
        first = await a.accept_delivery(
            KEY, incoming_message("one"), channel_key=CHANNEL, delivery_id="d1"
        )
        second = await a.accept_delivery(
            KEY, incoming_message("two"), channel_key=CHANNEL, delivery_id="d2"
        )
        assert first is not None and second is not None
        conversation_id = first.conversation.id
        assert await a.acquire_lease(conversation_id)
        fence = a.fence(conversation_id)
        assert fence is not None
        run = await a.start_run(conversation_id, deliver=[first.item.id], fence=fence)
        await freeze_heartbeat(a)
        for _ in range(int(LIMIT_S / 0.05)):
            if await b.acquire_lease(conversation_id):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("B never took the lease")
        yield Lapsed(a, b, conversation_id, run.id, second.item.id, fence)


async def test_a_takeover_draws_a_newer_epoch_a_renewal_keeps_it_and_the_old_clock_knows(
    lapsed: Lapsed,
) -> None:
    b, conversation_id = lapsed.b, lapsed.conversation_id
    new = b.fence(conversation_id)
    assert new is not None and new.epoch > lapsed.fence.epoch and new.holder != lapsed.fence.holder
    assert await b.acquire_lease(conversation_id)  # renewing its own
    assert b.fence(conversation_id) == new
    assert b.fresh(new)
    # A heard nothing (its heartbeat is frozen), but by its own clock a lease's life went by.
    assert not lapsed.a.fresh(lapsed.fence)


async def test_every_write_of_a_run_whose_lease_was_taken_is_refused_and_writes_nothing(
    lapsed: Lapsed,
) -> None:
    a, b, stale = lapsed.a, lapsed.b, lapsed.fence
    conversation_id, run_id, item_id = lapsed.conversation_id, lapsed.run_id, lapsed.item_id
    before = await b.load(conversation_id)
    reply = AssistantMessage(content=[Text(text="late")])
    writes = {
        "append": a.append_message(conversation_id, reply, run_id=run_id, fence=stale),
        "deliver": a.deliver(conversation_id, [item_id], run_id=run_id, fence=stale),
        "drop": a.drop(conversation_id, [item_id], "stopped", fence=stale),
        "finish": a.finish_run(run_id, "done", fence=stale),
        "surface": a.set_run_surface_ref(run_id, {"ts": "1"}, fence=stale),
        "start": a.start_run(conversation_id, fence=stale),
        "start delivering": a.start_run(conversation_id, deliver=[item_id], fence=stale),
        "compact": a.add_compaction(conversation_id, "summary", 1, fence=stale),
    }
    for what, write in writes.items():
        with pytest.raises(FencedOut):
            await write
            raise AssertionError(f"{what} landed")
    after = await b.load(conversation_id)
    assert after.messages == before.messages and after.compaction is None
    assert [r.id for r in await b.running_runs()] == [run_id]  # not finished by A
    assert [item.id for item in await b.pending(conversation_id)] == [item_id]
    # The holder's writes land.
    fence = b.fence(conversation_id)
    assert (await b.finish_run(run_id, "interrupted", fence=fence)).outcome == "interrupted"
    assert len(await b.deliver(conversation_id, [item_id], fence=fence)) == 1


async def test_appends_grouped_in_one_statement_are_fenced_one_by_one(lapsed: Lapsed) -> None:
    a, b, stale, conversation_id = lapsed.a, lapsed.b, lapsed.fence, lapsed.conversation_id
    other = await b.get_or_create_conversation(KEY + ".other", channel_key=CHANNEL)
    assert await a.acquire_lease(other.id)
    mine = a.fence(other.id)
    assert mine is not None
    reply = AssistantMessage(content=[Text(text="x")])
    # Many at once: while the first are in flight the rest are grouped into one statement.
    outcomes = await asyncio.gather(
        *(
            a.append_message(conversation_id, reply, fence=stale)
            if n % 2
            else a.append_message(other.id, reply, fence=mine)
            for n in range(40)
        ),
        return_exceptions=True,
    )
    assert all(isinstance(o, FencedOut) for o in outcomes[1::2])
    assert not any(isinstance(o, BaseException) for o in outcomes[0::2])
    assert await b.message_count(other.id) == 20
    assert [m.seq for m in (await b.load(conversation_id)).messages] == [1]  # "one" only


async def test_a_compaction_by_a_run_whose_lease_was_taken_stores_no_summary(
    lapsed: Lapsed,
) -> None:
    """The runner's compaction writes its summary with the run's fence: once the lease
    changed hands, the summary is refused like every other write of that run."""
    a, b, stale, conversation_id = lapsed.a, lapsed.b, lapsed.fence, lapsed.conversation_id
    for n in range(4):
        reply = AssistantMessage(content=[Text(text=f"turn {n} " + "words " * 50)])
        for message in (incoming_message(f"question {n}"), reply):
            await b.append_message(conversation_id, message, fence=b.fence(conversation_id))
    loaded = await a.load(conversation_id)
    model = ScriptedModel([Reply(text="the summary")])
    with pytest.raises(FencedOut):
        await compaction.compact_if_needed(
            a,
            CompactionSettings(keep_recent_tokens=10),
            loaded.conversation,
            loaded,
            model,
            force=True,
            fence=stale,
        )
    assert (await b.load(conversation_id)).compaction is None
