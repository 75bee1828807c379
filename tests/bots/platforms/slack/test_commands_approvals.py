"""`/teammate config approvals …` on Slack, end to end: an admin turns approvals on for a
channel (stored and audited), the next run waits for a person's click, `off` and `default`
undo it, and words it cannot read are refused with a hint."""

from __future__ import annotations

from pathlib import Path

from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.approval_tool import DangerTool
from tests.bots.platforms.slack.approval_helpers import wait_for_buttons
from tests.bots.platforms.slack.e2e_harness import ALICE
from tests.bots.platforms.slack.test_commands import CHANNEL, running
from tests.fakes.slack_server import FakeSlack


async def test_an_admin_turns_approvals_on_for_the_channel_and_the_next_run_waits(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "rm x"})]), Reply(text="ok")]
    )
    models = {"scripted": model}
    settings = {"slack": {"admins": [ALICE]}}
    async with running(fake_slack, tmp_path, tools=[tool], models=models, **settings) as app:
        assert "• approvals: off (configuration file)" in (await app.command("config"))["text"]
        refused = await app.command("config approvals danger approvers=everyone")
        assert "I can't read `approvers=everyone`" in refused["text"]
        saved = await app.command("config approvals danger approvers=admins timeout=60")
        assert "danger wait for an admin (at most 60 s) (set here)" in saved["text"]
        thread = await app.mention("remove x")
        await wait_for_buttons(fake_slack, CHANNEL, thread)
        assert tool.ran == []
        audit = await app.store.audit_entries(limit=5, action="config.set")
        assert audit and audit[0].detail["change"] == {
            "approvals": "danger approvers=admins timeout=60"
        }
        app.runner.stop(f"slack:{fake_slack.team_id}:{CHANNEL}:{thread}")
        await app.runner.wait_all()
        off = await app.command("config approvals off")
        assert "• approvals: off (set here)" in off["text"]
        default = await app.command("config approvals default")
        assert "• approvals: off (configuration file)" in default["text"]
