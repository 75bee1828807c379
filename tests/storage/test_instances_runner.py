"""Two runners (two Teammate instances) on one PostgreSQL database: a conversation runs in one
place; a steering message or a stop that reaches the other instance reaches that run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from bots.runner import QUEUED_TEXT, ConversationRunner
from bots.settings import Settings
from core.messages import AssistantMessage, Author, Message, Text, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AnyTool
from storage.base import ConversationStore, RunRecord
from storage.postgres import PostgresStore
from tests.bots.runner_helpers import BOB, CHANNEL, KEY, incoming
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import HoldingTheEnd, RecordingSurface, RecordingSurfaces

LIMIT_S = 30.0  # a hang guard, not a speed check


def said(message: Message) -> str:
    """What a person said, without the runner's "[who · when]" header."""
    return message.text().split("\n", 1)[-1]


def user_lines(messages: Sequence[Message]) -> list[str]:
    return [said(m) for m in messages if isinstance(m, UserMessage)]


def incoming_message(text: str) -> UserMessage:
    return UserMessage(content=text, author=Author(id="U1", name="Ada"), timestamp=1.0)


def make_runner(
    store: ConversationStore,
    data_dir: Path,
    model: ScriptedModel,
    tools: Sequence[AnyTool] = (),
    surfaces: RecordingSurfaces | None = None,
) -> ConversationRunner:
    return ConversationRunner(
        store=store,
        settings=Settings(data_dir=data_dir),
        model_factory=lambda _model_id: model,
        toolset_factory=lambda _channel: tools,
        platform_rules="Plain text only.",
        surfaces=surfaces or RecordingSurfaces(),
    )


async def history(store: ConversationStore) -> list[Message]:
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    return [stored.message for stored in (await store.load(conversation.id)).messages]


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        yield a, b


async def started(runner: ConversationRunner) -> ConversationRunner:
    await runner.recover()  # at start-up: also starts listening to the other instances
    return runner


async def test_a_message_reaching_another_instance_is_steered_into_the_running_answer(
    stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="both handled")])
    model_b = ScriptedModel([Reply(text="B must not answer")])
    surfaces_a = RecordingSurfaces()
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate], surfaces_a))
    b = await started(make_runner(stores[1], tmp_path / "b", model_b, [gate]))
    try:
        await a.submit(incoming("first"), RecordingSurface("ada"))
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)

        bob = RecordingSurface("bob")
        await b.submit(incoming("also this", author=BOB), bob)
        await bob.wait_for(lambda s: any(n.text == QUEUED_TEXT for n in s.notices()), LIMIT_S)
        for _ in range(int(LIMIT_S / 0.02)):  # A takes it in: it makes Bob's surface
            if surfaces_a.made:
                break
            await asyncio.sleep(0.02)
        gate.opened.set()
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        assert model_b.requests == []
        assert len(model_a.requests) == 2
        # Steered in after the tool batch, as on one process; stored once, in that order.
        assert user_lines(model_a.requests[1].messages) == ["first", "also this"]
        assert user_lines(await history(stores[1])) == ["first", "also this"]
        assert await stores[1].pending_conversations() == []
    finally:
        await a.close()
        await b.close()


async def test_a_stop_reaching_another_instance_stops_the_run_there(
    stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="never")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate]))
    b = await started(make_runner(stores[1], tmp_path / "b", ScriptedModel([]), [gate]))
    try:
        ada = RecordingSurface("ada")
        await a.submit(incoming("work"), ada)
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)

        assert b.stop(KEY, by=BOB) == "stopped"
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        [finished] = ada.finished()
        assert finished.outcome == "aborted"
        assert len(model_a.requests) == 1  # stopped inside the tool, never asked again
        assert not gate.opened.is_set()
    finally:
        await a.close()
        await b.close()


async def test_a_message_for_a_conversation_nobody_runs_is_answered_where_it_arrived(
    stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    model_a = ScriptedModel([Reply(text="from A")])
    model_b = ScriptedModel([Reply(text="from B"), Reply(text="from B again")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a))
    b = await started(make_runner(stores[1], tmp_path / "b", model_b))
    try:
        await b.submit(incoming("hello"), RecordingSurface("ada"))
        await asyncio.wait_for(b.wait(KEY), LIMIT_S)
        await a.submit(incoming("and again"), RecordingSurface("ada"))
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)
        # The lease was released after B's answer, so A could answer the next one itself.
        assert len(model_b.requests) == 1 and len(model_a.requests) == 1
        assert [said(m) for m in await history(stores[0])] == [
            "hello",
            "from B",
            "and again",
            "from A",
        ]
    finally:
        await a.close()
        await b.close()


async def dead_instance_run(pg_url: str, last: AssistantMessage) -> tuple[PostgresStore, RunRecord]:
    """Another instance's run of "question" (shown on surface "ada"), ending with `last`, its
    lease held for 0.5 s: the store is closed by the caller as that instance dies."""
    ada = {"surface": "recording", "name": "ada"}
    dead = await PostgresStore.open(pg_url, lease_ttl_s=0.5)
    accepted = await dead.accept_delivery(
        KEY, incoming_message("question"), channel_key=CHANNEL, delivery_id="e1", surface_ref=ada
    )
    assert accepted is not None
    conversation_id = accepted.conversation.id
    assert await dead.acquire_lease(conversation_id)
    run = await dead.start_run(
        conversation_id, owner={"host": "elsewhere", "pid": 1}, surface_ref=ada,
        deliver=[accepted.item.id],
    )  # fmt: skip
    await dead.append_message(conversation_id, last, run_id=run.id)
    return dead, run


async def test_a_dead_instances_run_is_recovered_and_announced_once_by_one_survivor(
    pg_url: str, tmp_path: Path
) -> None:
    dead, run = await dead_instance_run(pg_url, AssistantMessage(content=[call("gate")]))
    later = await dead.accept_delivery(
        KEY, incoming_message("still there?"), channel_key=CHANNEL, delivery_id="e2"
    )
    assert later is not None
    # It dies: no more heartbeats, and (unlike a clean close) its lease is not handed back.
    dead._instances._held.clear()
    await dead.close()

    models = [ScriptedModel([Reply(text="answered")]) for _ in range(2)]
    surfaces = [RecordingSurfaces() for _ in range(2)]
    async with PostgresStore.open(pg_url) as one, PostgresStore.open(pg_url) as two:
        survivors = [
            make_runner(store, tmp_path / str(n), models[n], (), surfaces[n])
            for n, store in enumerate((one, two))
        ]
        try:
            recovered: list[list[RunRecord]] = []
            for _ in range(int(LIMIT_S / 0.05)):  # until the dead instance's lease expires
                recovered = list(await asyncio.gather(*(s.recover() for s in survivors)))
                if any(recovered):
                    break
                await asyncio.sleep(0.05)
            assert sorted(len(r) for r in recovered) == [0, 1]
            [record] = [r for found in recovered for r in found]
            assert record.id == run.id and record.outcome == "interrupted"
            for survivor in survivors:
                await asyncio.wait_for(survivor.wait(KEY), LIMIT_S)
            # A second look finds nothing more to recover, anywhere.
            assert [await s.recover() for s in survivors] == [[], []]

            shown = [
                event
                for made in surfaces
                for _key, _ref, surface in made.made
                for event in surface.finished()
            ]
            assert [e.outcome for e in shown].count("interrupted") == 1
            assert sum(len(m.requests) for m in models) == 1  # the pending message, once
            history_roles = [m.role for m in await history(one)]
            assert history_roles == ["user", "assistant", "tool_result", "user", "assistant"]
        finally:
            for survivor in survivors:
                await survivor.close()


async def test_a_conversation_taken_over_by_a_new_message_closes_the_dead_run_first(
    pg_url: str, tmp_path: Path
) -> None:
    # Found by the scale-out test: an instance died after showing an answer and before closing
    # its run; the next message in that thread reached another instance, which took the
    # expired lease and answered it, and only then did a takeover sweep find the dead run open
    # and "show its answer", which it read from the end of history: the new answer, shown in
    # place of the old one. Whoever takes a conversation over closes its dead runs first.
    answered = AssistantMessage(content=[Text(text="the first answer")])
    dead, _run = await dead_instance_run(pg_url, answered)
    dead._instances._held.clear()  # it dies: no heartbeat, the lease is not handed back
    await dead.close()

    model = ScriptedModel([Reply(text="the second answer")])
    surfaces = RecordingSurfaces()
    async with PostgresStore.open(pg_url) as store:
        runner = make_runner(store, tmp_path, model, (), surfaces)  # no sweep has run yet
        try:
            await asyncio.sleep(0.6)  # the dead instance's lease expires
            bob = RecordingSurface("bob")
            assert await runner.submit(incoming("and then?", author=BOB), bob) == "started"
            await asyncio.wait_for(runner.wait(KEY), LIMIT_S)

            assert await store.running_runs() == []  # the dead run is closed, as answered
            [(_key, _ref, old)] = surfaces.made  # shown where the dead run was shown
            assert [(f.outcome, f.final_text) for f in old.finished()] == [
                ("done", "the first answer")
            ]
            assert [f.final_text for f in bob.finished()] == ["the second answer"]
            assert [said(m) for m in (await history(store))] == [
                "question", "the first answer", "and then?", "the second answer"
            ]  # fmt: skip
        finally:
            await runner.close()


async def test_a_message_arriving_during_a_takeover_keeps_its_lease_after_recovery(
    pg_url: str, tmp_path: Path
) -> None:
    # Recovery took a dead instance's lease to close its run; a new message in that
    # conversation arrived meanwhile and its driver took the same lease. Recovery then handed
    # "its" lease back: the driver answered without one, free for any other instance to take.
    dead, _run = await dead_instance_run(pg_url, AssistantMessage(content=[call("gate")]))
    dead._instances._held.clear()  # it dies: no heartbeat, the lease is not handed back
    await dead.close()

    gate = GateTool()
    model = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="answered")])
    holding = HoldingTheEnd()
    async with PostgresStore.open(pg_url) as store, PostgresStore.open(pg_url) as other:
        runner = make_runner(store, tmp_path, model, [gate], holding)
        try:
            await asyncio.sleep(0.6)  # the dead instance's lease expires
            recovering = asyncio.ensure_future(runner.recover())
            await asyncio.wait_for(holding.reached_the_end.wait(), LIMIT_S)
            bob = RecordingSurface("bob")
            assert await runner.submit(incoming("and then?", author=BOB), bob) == "started"
            holding.lift.set()
            await asyncio.wait_for(recovering, LIMIT_S)
            await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
            conversation = await store.get_conversation(KEY)
            assert conversation is not None
            assert not await other.acquire_lease(conversation.id)  # still held by the driver
            gate.opened.set()
            await asyncio.wait_for(runner.wait(KEY), LIMIT_S)
            assert [f.final_text for f in bob.finished()] == ["answered"]
        finally:
            gate.opened.set()
            await runner.close()
