"""End to end on Slack: a tool that needs approval waits for a person's click. Approve runs
it, deny and timeout do not (the model reads why and continues), only an approver's click
counts, one request lists a batch with each call decidable, stop ends the run while it
waits, and a message sent meanwhile is steered into the run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bots.features.approvals import Approvals
from bots.platforms.slack.blocks import STOP_ACTION_ID
from bots.workspaces import workspace_name
from core.messages import Author, ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.base import ApprovalRecord
from storage.sqlite import SqliteStore
from tests.bots.platforms.slack.approval_helpers import (
    DangerTool,
    approval_buttons,
    approval_click,
    wait_for_buttons,
)
from tests.bots.platforms.slack.e2e_harness import (
    ALICE,
    BOB,
    Harness,
    Mode,
    message_event,
    running,
    texts,
)
from tests.bots.platforms.slack.test_e2e_stop import click, stop_button
from tests.fakes.slack_server import FakeSlack

APPROVALS = {"tools": ["danger"], "approvers": "asker", "timeout_s": 600}


def results(model: ScriptedModel) -> list[ToolResultMessage]:
    """The tool results the model was sent, last request."""
    return [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]


async def audit_of(app: Harness) -> list[tuple[str, str, dict[str, Any]]]:
    entries = await app.store.audit_entries(limit=50)
    return [
        (e.actor, e.action, e.detail) for e in reversed(entries) if e.action.startswith("approval")
    ]


async def stored(app: Harness, approval_id: int) -> ApprovalRecord:
    found = await app.store.approval(approval_id)
    assert found is not None
    return found


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_approve_runs_the_tool_and_the_request_shows_who(
    fake_slack: FakeSlack, tmp_path: Path, mode: Mode
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "rm -rf build"})]), Reply(text="Done.")]
    )
    async with running(
        fake_slack, tmp_path, model, mode=mode, tools=[tool], approvals=APPROVALS
    ) as app:
        event = message_event(fake_slack, "clean up")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        assert "rm -rf build" in texts([message]) and "Waiting for" in texts([message])
        assert tool.ran == []  # nothing runs before the click
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id), kind="interactive"
        )
        await app.settle()
        record = await stored(app, approval_id)
        audit = await audit_of(app)

    assert tool.ran == ["rm -rf build"]
    assert results(model)[0].is_error is False
    assert record.state == "approved" and record.decided_by == ALICE
    assert approval_buttons(fake_slack, "C1", event["ts"]) == []  # the buttons went away
    shown = texts(app.replies("C1", event["ts"]))
    assert "Approved by" in shown and "Done." in shown
    assert [(actor, action) for actor, action, _ in audit] == [
        ("system", "approval.request"),
        (f"slack:{ALICE}", "approval.decision"),
    ]


async def test_deny_tells_the_model_who_denied_and_it_continues(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "deploy"})]), Reply(text="Understood.")]
    )
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "deploy it")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        await app.send(approval_click(fake_slack, message, "deny", approval_id), kind="interactive")
        await app.settle()

    assert tool.ran == []
    [result] = results(model)
    assert result.is_error and "denied" in result.text() and "denied by" in result.text()
    shown = texts(app.replies("C1", event["ts"]))
    assert "Denied by" in shown and "Understood." in shown


async def test_a_non_approvers_click_is_refused_privately_and_not_counted(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "ls"})]), Reply(text="ok")])
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "list")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id, user=BOB),
            kind="interactive",
        )
        await fake_slack.wait_for(lambda f: any(e.get("user") == BOB for e in f.ephemerals), 30)
        assert (await stored(app, approval_id)).pending and tool.ran == []
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id), kind="interactive"
        )
        await app.settle()

    assert tool.ran == ["ls"]
    [note] = [e["text"] for e in fake_slack.ephemerals if e.get("user") == BOB]
    assert "not counted" in note


async def test_an_admin_may_decide_when_admins_approve(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "ls"})]), Reply(text="ok")])
    policy = APPROVALS | {"approvers": "asker_or_admins"}
    async with running(
        fake_slack, tmp_path, model, tools=[tool], approvals=policy, slack={"admins": [BOB]}
    ) as app:
        event = message_event(fake_slack, "list")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id, user=BOB),
            kind="interactive",
        )
        await app.settle()
        assert (await stored(app, approval_id)).decided_by == BOB
    assert tool.ran == ["ls"]


async def test_a_request_nobody_answers_times_out_and_the_model_is_told(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")])
    async with running(
        fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS | {"timeout_s": 1}
    ) as app:
        event = message_event(fake_slack, "go")
        await app.event(event)
        await app.settle(60)
        audit = await audit_of(app)
    assert tool.ran == []
    [result] = results(model)
    assert result.is_error and "timed out" in result.text()
    assert "Nobody approved this in time" in texts(app.replies("C1", event["ts"]))
    assert [(actor, action, d["decision"]) for actor, action, d in audit[1:]] == [
        ("system", "approval.decision", "timed_out")
    ]


async def test_a_batch_of_two_is_one_request_with_each_call_decided(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    call("danger", {"command": "first"}),
                    call("danger", {"command": "second"}),
                ]
            ),
            Reply(text="ok"),
        ]
    )
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "both")
        await app.event(event)
        found = await wait_for_buttons(fake_slack, "C1", event["ts"], count=2)
        assert found[0][0]["ts"] == found[1][0]["ts"]  # one request message lists both
        (message, first), (_, second) = found
        await app.send(approval_click(fake_slack, message, "approve", first), kind="interactive")
        await app.send(approval_click(fake_slack, message, "deny", second), kind="interactive")
        await app.settle()

    assert tool.ran == ["first"]
    assert [r.is_error for r in results(model)] == [False, True]


async def test_stop_while_waiting_ends_the_run_and_cancels_the_request(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "x"})])])
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "go")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        await fake_slack.wait_for(lambda f: stop_button(f, "C1", event["ts"]) is not None, 30)
        found = stop_button(fake_slack, "C1", event["ts"])
        assert found is not None
        await app.send(click(fake_slack, found[0], STOP_ACTION_ID, found[1]), kind="interactive")
        await app.settle()
        await fake_slack.wait_for(lambda f: not approval_buttons(f, "C1", event["ts"]), 30)
        record = await stored(app, approval_id)
        # A click after the stop decides nothing and says so.
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id), kind="interactive"
        )
        await fake_slack.wait_for(lambda f: any(e.get("user") == ALICE for e in f.ephemerals), 30)
        await app.settle()

    assert tool.ran == [] and record.state == "cancelled"
    assert "stopped" in texts(app.replies("C1", event["ts"])).lower()
    assert any("decided already" in e["text"] for e in fake_slack.ephemerals)


async def test_a_message_sent_while_waiting_is_steered_into_the_run(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")])
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "go")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        later = message_event(fake_slack, "also mind the logs", thread_ts=event["ts"])
        await app.event(later)
        await asyncio.sleep(0.2)
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id), kind="interactive"
        )
        await app.settle()

    assert tool.ran == ["x"]
    assert len(model.requests) == 2  # one run: the steered message joined it after the tool
    sent = texts([m.model_dump() for m in model.requests[-1].messages])
    assert "also mind the logs" in sent


async def test_a_restart_while_waiting_keeps_the_request_and_approval_continues_the_run(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    before = DangerTool()
    first = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "migrate"})])])
    async with running(fake_slack, tmp_path, first, tools=[before], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "migrate the db")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])

    after = DangerTool()
    second = ScriptedModel([Reply(text="Migrated.")])
    async with running(fake_slack, tmp_path, second, tools=[after], approvals=APPROVALS) as app:
        assert (await stored(app, approval_id)).pending  # kept across the restart
        # The button posted before the restart still works.
        await app.send(
            approval_click(fake_slack, message, "approve", approval_id), kind="interactive"
        )
        await app.settle()
        run = (await app.store.run_approvals((await stored(app, approval_id)).run_id))[0]
        runs = await app.store.running_runs()

    assert before.ran == [] and after.ran == ["migrate"]
    assert len(first.requests) == 1 and len(second.requests) == 1  # not asked for the call again
    assert results(second)[0].is_error is False and run.state == "approved"
    assert runs == []  # the resumed run was closed
    assert "Migrated." in texts(app.replies("C1", event["ts"]))


async def test_two_instances_racing_on_one_request_count_one_decision(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel([Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")])
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "go")
        await app.event(event)
        [(message, approval_id)] = await wait_for_buttons(fake_slack, "C1", event["ts"])
        # Another instance on the same database, deciding the same request at the same time
        # as this one handles a click on it (Slack delivers each click to one instance).
        async with SqliteStore.open(tmp_path / "teammate.db") as other_store:
            other = Approvals(other_store)
            channel = f"slack:{fake_slack.team_id}:C1"
            outcomes = await asyncio.gather(
                other.decide(
                    approval_id,
                    approve=False,
                    by=Author(id=ALICE, name="Alice"),
                    is_admin=False,
                    channel_keys=(channel,),
                ),
                app.send(
                    approval_click(fake_slack, message, "approve", approval_id),
                    kind="interactive",
                ),
            )
        await app.settle()
        record = await stored(app, approval_id)
        audit = await audit_of(app)

    decisions = [d for _, action, d in audit if action == "approval.decision"]
    assert len(decisions) == 1  # exactly one decision counts
    other_won = outcomes[0][0] == "decided"
    assert record.state == ("denied" if other_won else "approved")
    assert tool.ran == ([] if other_won else ["x"])
    if not other_won:
        assert outcomes[0][0] == "stale"


async def test_approve_the_rest_of_this_run_passes_the_tools_later_calls(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    call("danger", {"command": "one"}),
                    call("danger", {"command": "two"}),
                ]
            ),
            Reply(tool_calls=[call("danger", {"command": "three"})]),
            Reply(text="all done"),
        ]
    )
    async with running(fake_slack, tmp_path, model, tools=[tool], approvals=APPROVALS) as app:
        event = message_event(fake_slack, "three things")
        await app.event(event)
        [(message, first), _] = await wait_for_buttons(fake_slack, "C1", event["ts"], count=2)
        await app.send(approval_click(fake_slack, message, "rest", first), kind="interactive")
        await app.settle()
        audit = await audit_of(app)

    assert tool.ran == ["one", "two", "three"]  # the second and the later call: no new request
    assert [action for _, action, _ in audit].count("approval.request") == 2
    assert all(d.get("rest_of_run") for _, action, d in audit if action == "approval.decision")


class WriteParams(BaseModel):
    path: str
    content: str


class FakeWrite(AgentTool[WriteParams]):
    """Named like the real `write`: its request shows a diff against the file as it is."""

    name = "write"
    label = "Write"
    description = "Writes a file."
    parameters = WriteParams

    async def execute(self, call_id: str, params: WriteParams, ctx: ToolContext) -> ToolResult:
        (ctx.workspace / params.path).write_text(params.content)
        return ToolResult.text("written")


async def test_a_write_request_shows_the_change_to_the_file_as_it_is(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    call("write", {"path": "notes.txt", "content": "alpha\nBETA\ngamma\n"}),
                    call("write", {"path": "../outside.txt", "content": "x"}),
                ]
            ),
            Reply(text="ok"),
        ]
    )
    (tmp_path / "outside.txt").write_text("secret outside the workspace\n")
    policy = APPROVALS | {"tools": ["write"]}
    async with running(fake_slack, tmp_path, model, tools=[FakeWrite()], approvals=policy) as app:
        channel = f"slack:{fake_slack.team_id}:C1"
        (app.workspaces / workspace_name(channel)).mkdir(parents=True, exist_ok=True)
        (app.workspaces / workspace_name(channel) / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        event = message_event(fake_slack, "fix the notes")
        await app.event(event)
        [(message, _), _] = await wait_for_buttons(fake_slack, "C1", event["ts"], count=2)
        shown = texts([message])
        app.runner.stop(f"{channel}:{event['ts']}")
        await app.settle()

    assert "notes.txt" in shown and "-beta" in shown and "+BETA" in shown
    assert "secret outside the workspace" not in shown  # never read from outside
