"""`/teammate` writes the audit log: who changed a channel's configuration, memory or threads,
and who stopped its answers — end to end through the real bolt app, runner and store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.models.scripted import Reply, ScriptedModel
from tests.bots.platforms.slack.e2e_harness import ALICE, BOB
from tests.bots.platforms.slack.test_commands import CHANNEL, running
from tests.fakes.slack_server import FakeSlack


async def test_admin_actions_are_audited_with_who_what_and_where(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    channel_key = f"slack:{fake_slack.team_id}:{CHANNEL}"
    slow = ScriptedModel(
        default=Reply(text="a long answer " * 50, chunk_delay_s=0.05, chunk_size=4)
    )
    settings: dict[str, Any] = {
        "slack": {"admins": [ALICE]},
        "anthropic_api_key": "sk-audit-secret",
    }
    async with running(fake_slack, tmp_path, models={"scripted": slow}, **settings) as app:
        assert "Only Teammate's admins" in (await app.command("config prompt x", user=BOB))["text"]
        assert await app.store.audit_entries(limit=10) == []  # a refusal changes nothing

        assert "Saved" in (await app.command("config prompt Say sk-audit-secret daily."))["text"]
        assert (
            "Remembered" in (await app.command("memory add the wiki is at /wiki", user=BOB))["text"]
        )
        assert "Cleared" in (await app.command("memory clear"))["text"]
        await app.mention("one")
        assert (await app.command("stop", user=BOB))["text"] == "Stopped 1 answer in this channel."
        await app.runner.wait_all()
        assert "forgotten 1 thread" in (await app.command("reset"))["text"]

        entries = await app.store.audit_entries(limit=10)
    done = [(entry.actor, entry.action, entry.target, entry.origin) for entry in entries[::-1]]
    assert done == [
        (f"slack:{ALICE}", "config.set", channel_key, "slack"),
        (f"slack:{BOB}", "memory.add", channel_key, "slack"),
        (f"slack:{ALICE}", "memory.clear", channel_key, "slack"),
        (f"slack:{BOB}", "run.stop", channel_key, "slack"),
        (f"slack:{ALICE}", "conversation.reset", channel_key, "slack"),
    ]
    config = entries[-1].detail
    assert config["change"] == {"prompt": "Say [redacted] daily."}  # a secret is never kept
    assert "sk-audit-secret" not in str([entry.detail for entry in entries])
    assert entries[-2].detail["text"] == "the wiki is at /wiki"
    assert entries[1].detail["answers"] == 1
    assert entries[0].detail["threads"] == 1
