"""End to end on Discord: the real discord.py bot against the fake Discord. A tool that
needs approval waits for a press; approve runs it, deny and timeout do not (the model reads
why), only an approver's press counts (the others get a private answer), a batch is one
request with each call decidable, stop ends the run while it waits, a message sent meanwhile
is steered into the run, a restart keeps the request (its buttons still work and the run
continues from the stored call), and two instances deciding at once count one decision."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.features.approvals import Approvals
from bots.platforms.discord.bot import DISCORD_RULES
from bots.platforms.discord.surface import DiscordSurfaces
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings
from core.messages import Author, ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.approval_tool import DangerTool
from tests.bots.platforms.discord.test_bot_e2e import (
    ADA,
    BOB,
    Teammate,
    custom_ids,
    ephemeral,
    started_teammate,
)
from tests.fakes.discord_server import FakeDiscord

APPROVALS = {"tools": ["danger"], "approvers": "asker", "timeout_s": 600}


@pytest.fixture
def tool() -> DangerTool:
    return DangerTool()


@pytest.fixture
async def teammate(
    fake_discord: FakeDiscord, tmp_path: Path, tool: DangerTool
) -> AsyncIterator[Teammate]:
    async with started_teammate(
        fake_discord, tmp_path, DiscordSettings(), tools=[tool], approvals=APPROVALS
    ) as harness:
        yield harness


def requests(teammate: Teammate, thread: str) -> list[tuple[dict[str, Any], str]]:
    """(message, approve button id) of every call whose buttons still show."""
    return [
        (message, custom_id)
        for message in teammate.fake.channel_messages(thread)
        for custom_id in custom_ids(message)
        if custom_id.startswith("approval:") and custom_id.endswith(":approve")
    ]


async def wait_for_request(
    teammate: Teammate, thread: str, count: int = 1
) -> list[tuple[dict[str, Any], int]]:
    await teammate.fake.wait_for(lambda: len(requests(teammate, thread)) >= count, 30)
    return [(m, int(c.split(":")[1])) for m, c in requests(teammate, thread)]


def press(
    teammate: Teammate, message: dict[str, Any], choice: str, approval_id: int, **kw: Any
) -> Any:
    return teammate.fake.button_press(f"approval:{approval_id}:{choice}", message, **kw)


def results(model: ScriptedModel) -> list[ToolResultMessage]:
    return [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]


def key_of(teammate: Teammate, thread: str) -> str:
    return f"discord:{next(iter(teammate.fake.guilds))}:{thread}"


async def start(teammate: Teammate, *replies: Reply, text: str = "do it") -> str:
    teammate.model.add(*replies)
    asked = await teammate.mention(text)
    return str(asked["id"])


async def test_approve_runs_the_tool_and_the_request_shows_who(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(
        teammate,
        Reply(tool_calls=[call("danger", {"command": "rm -rf build"})]),
        Reply(text="Done."),
    )
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    assert "rm -rf build" in message["content"] and "Waiting for Ada" in message["content"]
    assert tool.ran == []
    assert (
        await ephemeral(teammate, press(teammate, message, "approve", approval_id)) == "Approved."
    )
    await teammate.runner.wait(key_of(teammate, thread))
    assert tool.ran == ["rm -rf build"] and results(teammate.model)[0].is_error is False
    assert requests(teammate, thread) == []  # the buttons went away
    contents = "\n".join(teammate.contents(thread))
    assert "Approved by Ada" in contents and "Done." in contents
    audit = await teammate.store.audit_entries(limit=10, action="approval.decision")
    assert [e.actor for e in audit] == [f"discord:{ADA}"]


async def test_deny_tells_the_model_and_it_continues(teammate: Teammate, tool: DangerTool) -> None:
    thread = await start(
        teammate, Reply(tool_calls=[call("danger", {"command": "deploy"})]), Reply(text="Okay.")
    )
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    assert await ephemeral(teammate, press(teammate, message, "deny", approval_id)) == "Denied."
    await teammate.runner.wait(key_of(teammate, thread))
    assert tool.ran == []
    [result] = results(teammate.model)
    assert result.is_error and "denied by Ada" in result.text()
    assert "Denied by Ada" in "\n".join(teammate.contents(thread))


async def test_a_non_approvers_press_gets_a_private_answer_and_is_not_counted(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(
        teammate, Reply(tool_calls=[call("danger", {"command": "ls"})]), Reply(text="ok")
    )
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    note = await ephemeral(teammate, press(teammate, message, "approve", approval_id, user=BOB))
    assert "not counted" in note
    assert (await teammate.store.approval(approval_id)).pending  # type: ignore[union-attr]
    await ephemeral(teammate, press(teammate, message, "approve", approval_id))
    await teammate.runner.wait(key_of(teammate, thread))
    assert tool.ran == ["ls"]


async def test_a_batch_is_one_request_with_each_call_decided(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(
        teammate,
        Reply(tool_calls=[call("danger", {"command": "one"}), call("danger", {"command": "two"})]),
        Reply(text="ok"),
    )
    found = await wait_for_request(teammate, thread, count=2)
    assert found[0][0]["id"] == found[1][0]["id"]  # one message
    (message, first), (_, second) = found
    await ephemeral(teammate, press(teammate, message, "approve", first))
    await ephemeral(teammate, press(teammate, message, "deny", second))
    await teammate.runner.wait(key_of(teammate, thread))
    assert tool.ran == ["one"]
    assert [r.is_error for r in results(teammate.model)] == [False, True]


async def test_stop_while_waiting_ends_the_run_and_cancels_the_request(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(teammate, Reply(tool_calls=[call("danger", {"command": "x"})]))
    [(shown, approval_id)] = await wait_for_request(teammate, thread)
    message = copy.deepcopy(shown)  # as a client still showing the buttons has it
    head = teammate.fake.channel_messages(thread)[0]
    (stop_id,) = custom_ids(head)
    assert await ephemeral(teammate, teammate.fake.button_press(stop_id, head)) == "Stopped."
    await teammate.runner.wait(key_of(teammate, thread))
    await teammate.fake.wait_for(lambda: not requests(teammate, thread), 30)
    assert tool.ran == []
    record = await teammate.store.approval(approval_id)
    assert record is not None and record.state == "cancelled"
    note = await ephemeral(teammate, press(teammate, message, "approve", approval_id))
    assert "decided already" in note


async def test_a_message_sent_while_waiting_is_steered_into_the_run(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(
        teammate, Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")
    )
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    later = teammate.fake.message_payload(thread, "and check the logs", mention_bot=True)
    await teammate.fake.dispatch("MESSAGE_CREATE", later)
    await asyncio.sleep(0.2)
    await ephemeral(teammate, press(teammate, message, "approve", approval_id))
    await teammate.runner.wait(key_of(teammate, thread))
    assert tool.ran == ["x"] and len(teammate.model.requests) == 2
    assert "and check the logs" in str(
        [m.model_dump() for m in teammate.model.requests[-1].messages]
    )


async def test_a_request_nobody_answers_times_out(
    fake_discord: FakeDiscord, tmp_path: Path, tool: DangerTool
) -> None:
    async with started_teammate(
        fake_discord,
        tmp_path,
        DiscordSettings(),
        tools=[tool],
        approvals=APPROVALS | {"timeout_s": 1},
    ) as teammate:
        thread = await start(
            teammate, Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")
        )
        await teammate.fake.wait_for(
            lambda: bool(teammate.runner.current_run(key_of(teammate, thread))), 30
        )
        await asyncio.wait_for(teammate.runner.wait(key_of(teammate, thread)), 60)
        assert tool.ran == []
        [result] = results(teammate.model)
        assert "timed out" in result.text()
        assert "Nobody approved this in time" in "\n".join(teammate.contents(thread))


async def test_a_restart_while_waiting_keeps_the_request_and_approval_continues_the_run(
    teammate: Teammate, tool: DangerTool
) -> None:
    thread = await start(teammate, Reply(tool_calls=[call("danger", {"command": "migrate"})]))
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    old_message = copy.deepcopy(message)
    # Teammate restarts: the bot and the runner stop, a new runner recovers from the store.
    await teammate.stop_bot()
    await teammate.runner.close()
    surfaces = DiscordSurfaces()
    after = ScriptedModel([Reply(text="Migrated.")])
    restarted = ConversationRunner(
        store=teammate.store,
        settings=teammate.settings,
        model_factory=lambda _model_id: after,
        toolset_factory=lambda _channel: [tool],
        platform_rules=DISCORD_RULES,
        surfaces=surfaces,
    )
    teammate.runner = restarted
    await teammate.start_bot_with(surfaces)
    await restarted.recover()
    assert (await teammate.store.approval(approval_id)).pending  # type: ignore[union-attr]
    # The button posted before the restart still works.
    await ephemeral(teammate, press(teammate, old_message, "approve", approval_id))
    await restarted.wait(key_of(teammate, thread))
    assert tool.ran == ["migrate"]
    assert len(after.requests) == 1  # the model was not asked for the call again
    assert results(after)[0].is_error is False
    assert "Migrated." in "\n".join(teammate.contents(thread))
    assert await teammate.store.running_runs() == []
    await restarted.close()


async def test_two_instances_deciding_at_once_count_one_decision(
    teammate: Teammate, tool: DangerTool, tmp_path: Path
) -> None:
    thread = await start(
        teammate, Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")
    )
    [(message, approval_id)] = await wait_for_request(teammate, thread)
    channel = f"discord:{next(iter(teammate.fake.guilds))}:{teammate.general}"
    async with SqliteStore.open(tmp_path / "teammate.db") as other_store:
        other = Approvals(other_store)
        decided, note = await asyncio.gather(
            other.decide(
                approval_id,
                approve=False,
                by=Author(id=str(ADA), name="Ada"),
                is_admin=False,
                channel_keys=(channel,),
            ),
            ephemeral(teammate, press(teammate, message, "approve", approval_id)),
        )
    await teammate.runner.wait(key_of(teammate, thread))
    audit = await teammate.store.audit_entries(limit=10, action="approval.decision")
    assert len(audit) == 1
    if decided[0] == "decided":
        assert tool.ran == [] and "decided already" in note
    else:
        assert tool.ran == ["x"] and note == "Approved."
