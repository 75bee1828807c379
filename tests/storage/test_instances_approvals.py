"""Several instances on one PostgreSQL database: a run left waiting for approval by an
instance that died is taken over with its conversation's lease and continued from its stored
call (the model is not asked for it again), once its request is approved."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import AssistantMessage, Author, ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.postgres import PostgresStore
from tests.bots.approval_tool import DangerTool
from tests.bots.runner_helpers import BOB, CHANNEL, KEY, incoming
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.storage.test_instances_runner import LIMIT_S, dead_instance_run

APPROVALS = {"tools": ["danger"], "approvers": "asker_or_admins", "timeout_s": 600}


async def test_a_dead_instances_run_waiting_for_approval_is_continued_where_it_was_taken_over(
    pg_url: str, tmp_path: Path
) -> None:
    waiting = AssistantMessage(
        content=[call("danger", {"command": "deploy"}, id="call_deploy")], stop_reason="tool_use"
    )
    dead, run = await dead_instance_run(pg_url, waiting)
    now = await dead.now()
    request = await dead.add_approval(
        conversation_id=run.conversation_id,
        conversation_key=run.conversation_key,
        channel_key=run.channel_key,
        run_id=run.id,
        call_id="call_deploy",
        tool_name="danger",
        request={"label": "deploy", "approvers": "asker_or_admins", "asker_id": "U1"},
        now=now,
        expires_at=now + 600,
    )
    dead._instances._held.clear()  # it dies: no heartbeat, the lease is not handed back
    await dead.close()

    tool = DangerTool()
    model = ScriptedModel([Reply(text="deployed, and hello")])
    async with PostgresStore.open(pg_url) as store:
        runner = ConversationRunner(
            store=store,
            settings=Settings(data_dir=tmp_path, approvals=APPROVALS),
            model_factory=lambda _model_id: model,
            toolset_factory=lambda _channel: [tool],
            platform_rules="Plain text only.",
            surfaces=RecordingSurfaces(),
        )
        try:
            await asyncio.sleep(0.6)  # the dead instance's lease expires
            # A new message takes the conversation over: the waiting run is continued first.
            bob = RecordingSurface("bob")
            assert await runner.submit(incoming("hello?", author=BOB), bob) == "started"
            for _ in range(int(LIMIT_S / 0.05)):
                if runner.approvals.waiting(request.id):
                    break
                await asyncio.sleep(0.05)
            assert tool.ran == [] and runner.approvals.waiting(request.id)
            outcome, _ = await runner.approvals.decide(
                request.id,
                approve=True,
                by=Author(id="U1", name="Ada"),
                is_admin=False,
                channel_keys=(CHANNEL,),
            )
            assert outcome == "decided"
            await asyncio.wait_for(runner.wait(KEY), LIMIT_S)
        finally:
            await runner.close()
        assert tool.ran == ["deploy"]
        # One model call, after the tool: the new message was steered into the continued run.
        [sent] = [request.messages for request in model.requests]
        results = [m for m in sent if isinstance(m, ToolResultMessage)]
        assert [r.tool_call_id for r in results] == ["call_deploy"] and not results[0].is_error
        assert sent[-1].text().endswith("hello?")
        assert await store.running_runs() == []
