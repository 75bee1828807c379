"""Two instances on one PostgreSQL database, pinned: what people are told when a stop or a
message reaches the instance that does not run the conversation."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import asyncpg

from bots.runner import ConversationRunner
from bots.settings import Settings
from core.models.scripted import Reply, ScriptedModel, call
from storage.postgres import PostgresStore
from tests.bots.runner_helpers import BOB, CHANNEL, KEY, incoming
from tests.fakes.gate_tool import GateTool
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.storage.test_instances_runner import (
    LIMIT_S,
    history,
    incoming_message,
    make_runner,
    said,
    started,
    stores,  # noqa: F401  (the fixture)
    user_lines,
)


async def test_a_stop_from_another_instance_names_who_stopped_the_run(
    stores: tuple[PostgresStore, PostgresStore],  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="never")])
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate]))
    b = await started(make_runner(stores[1], tmp_path / "b", ScriptedModel([]), [gate]))
    try:
        ada = RecordingSurface("ada")
        await a.submit(incoming("work"), ada)
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
        run_id = a.current_run(KEY)

        assert b.stop(KEY, run_id, by=BOB) == "stopped"  # Bob's Stop button, shown by B
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        [finished] = ada.finished()
        assert (finished.outcome, finished.error_text) == ("aborted", "Stopped by Bob.")
    finally:
        await a.close()
        await b.close()


async def test_a_message_another_instance_left_while_this_one_ran_is_answered_after_the_run(
    stores: tuple[PostgresStore, PostgresStore],  # noqa: F811
    tmp_path: Path,
) -> None:
    # A does not listen (its notifications were lost): it learns of B's message only when it
    # lets go of the conversation after its run, and must then take it back and answer it.
    gate = GateTool()
    model_a = ScriptedModel(
        [Reply(tool_calls=[call("gate")]), Reply(text="one"), Reply(text="two")]
    )
    a = make_runner(stores[0], tmp_path / "a", model_a, [gate])
    b = make_runner(stores[1], tmp_path / "b", ScriptedModel([Reply(text="B must not answer")]))
    try:
        await a.submit(incoming("first"), RecordingSurface("ada"))
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)
        bob = RecordingSurface("bob")
        assert await b.submit(incoming("also this", author=BOB), bob) == "started"
        await asyncio.wait_for(b.wait(KEY), LIMIT_S)  # B handed it over: A holds the lease
        gate.opened.set()
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        assert [said(m) for m in await history(stores[0])][-2:] == ["also this", "two"]
        assert await stores[0].pending_conversations() == []
    finally:
        await a.close()
        await b.close()


async def test_a_survivor_takes_over_a_dead_instances_messages_without_being_told(
    pg_url: str, tmp_path: Path
) -> None:
    dead = await PostgresStore.open(pg_url, lease_ttl_s=2.0)
    accepted = await dead.accept_delivery(
        KEY, incoming_message("anyone?"), channel_key=CHANNEL, delivery_id="e1",
        surface_ref={"surface": "recording", "name": "ada"},
    )  # fmt: skip
    assert accepted is not None
    assert await dead.acquire_lease(accepted.conversation.id)
    dead._instances._held.clear()  # it dies holding the lease: no heartbeat, no hand-back
    await dead.close()

    model = ScriptedModel([Reply(text="here")])
    async with PostgresStore.open(pg_url, lease_ttl_s=1.0) as store:
        survivor = ConversationRunner(
            store=store,
            settings=Settings(data_dir=tmp_path, instance_lease_s=1.0),
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: (),
            platform_rules="Plain text only.",
            surfaces=RecordingSurfaces(),
        )
        await started(survivor)  # once, at start-up; the lease may still be held then
        try:
            # The periodic look for what dead instances left answers it once the lease expires.
            for _ in range(int(LIMIT_S / 0.05)):
                if await store.pending_conversations() == [] and not survivor.is_running(KEY):
                    break
                await asyncio.sleep(0.05)
            assert [said(m) for m in await history(store)] == ["anyone?", "here"]
        finally:
            await survivor.close()


def accept_elsewhere_while_this_loop_stands_still(pg_url: str, text: str) -> None:
    """Another instance accepts `text` (in its own thread and event loop); meanwhile this
    event loop is blocked, so nothing here can listen again before the notification is sent."""

    async def accept() -> None:
        async with PostgresStore.open(pg_url) as elsewhere:
            accepted = await elsewhere.accept_delivery(
                KEY, incoming_message(text), channel_key=CHANNEL, delivery_id="elsewhere-1",
                surface_ref={"surface": "recording", "name": "bob"},
            )  # fmt: skip
            assert accepted is not None

    thread = threading.Thread(target=asyncio.run, args=(accept(),))
    thread.start()
    thread.join()


async def test_a_message_missed_while_not_listening_is_taken_into_the_run_once_listening_again(
    stores: tuple[PostgresStore, PostgresStore],  # noqa: F811
    pg_url: str,
    tmp_path: Path,
) -> None:
    gate = GateTool()
    model_a = ScriptedModel([Reply(tool_calls=[call("gate")]), Reply(text="both handled")])
    surfaces_a = RecordingSurfaces()
    a = await started(make_runner(stores[0], tmp_path / "a", model_a, [gate], surfaces_a))
    try:
        await a.submit(incoming("first"), RecordingSurface("ada"))
        await asyncio.wait_for(gate.entered.wait(), LIMIT_S)

        # A's listening connection drops (waiting until it is gone), and a message is
        # accepted elsewhere before A can listen again: A never hears of it directly.
        admin = await asyncpg.connect(pg_url)
        try:
            await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                "WHERE query = $1 AND pid <> pg_backend_pid()",
                f'LISTEN "{stores[0]._instances.channel}"',
            )
            accept_elsewhere_while_this_loop_stands_still(pg_url, "also this")
        finally:
            await admin.close()

        for _ in range(int(LIMIT_S / 0.02)):  # listening again, A looks at what it missed
            if surfaces_a.made:
                break
            await asyncio.sleep(0.02)
        gate.opened.set()
        await asyncio.wait_for(a.wait(KEY), LIMIT_S)

        # Steered into the running answer, as if A had heard of it.
        assert len(model_a.requests) == 2
        assert user_lines(model_a.requests[1].messages) == ["first", "also this"]
        assert await stores[0].pending_conversations() == []
    finally:
        await a.close()
