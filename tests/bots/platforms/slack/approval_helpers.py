"""Approvals on Slack, end to end: a tool that must be approved, the request's buttons as
the fake holds them, and a click on one as Slack sends it."""

from __future__ import annotations

from typing import Any

from bots.platforms.slack.approval_blocks import APPROVAL_ACTION_IDS, Choice
from tests.bots.approval_tool import DangerTool as DangerTool
from tests.bots.platforms.slack.e2e_harness import ALICE
from tests.bots.platforms.slack.test_e2e_stop import click
from tests.fakes.slack_server import FakeSlack


def approval_buttons(
    fake: FakeSlack, channel: str, thread_ts: str
) -> list[tuple[dict[str, Any], int]]:
    """(request message, approval id) of every call whose buttons are still showing."""
    found = []
    for message in fake.bot_replies(channel, thread_ts):
        for block in message.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("action_id") == APPROVAL_ACTION_IDS["approve"]:
                    found.append((message, int(element["value"].split(":")[1])))
    return found


async def wait_for_buttons(
    fake: FakeSlack, channel: str, thread_ts: str, count: int = 1
) -> list[tuple[dict[str, Any], int]]:
    await fake.wait_for(lambda f: len(approval_buttons(f, channel, thread_ts)) >= count, 30)
    return approval_buttons(fake, channel, thread_ts)


def approval_click(
    fake: FakeSlack, message: dict[str, Any], choice: Choice, approval_id: int, user: str = ALICE
) -> dict[str, Any]:
    return click(fake, message, APPROVAL_ACTION_IDS[choice], f"{choice}:{approval_id}", user=user)
