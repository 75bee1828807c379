"""An acknowledged Slack event survives a SIGKILL before it reached the store.

Slack never delivers an acknowledged event again, so the one moment a crash could lose a
message is after the ack and before `accept_delivery` commits (looking up the author's name,
downloading files, reading the thread). The fake Slack holds the name lookup (`users.info`):
the real `teammate slack --http` process has acknowledged the event and waits inside that
window when it is SIGKILLed; after a restart the message must still be answered.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.slack_ack import Target, answered, child_env, post, prepare, start_target
from tests.chaos.hooked_slack import HookedSlack

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 60.0  # a hang guard, not a speed check


async def start(fake: HookedSlack, data_dir: Path) -> Target:
    command = [sys.executable, "-m", "bots.cli", "slack", "--http"]
    command += ["--host", "127.0.0.1", "--port", "0"]
    return await start_target("teammate", command, child_env(fake, str(data_dir)), str(ROOT))


async def test_an_event_acknowledged_but_not_yet_accepted_is_answered_after_a_sigkill(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def hold_name_lookups(method: str, _args: dict[str, Any]) -> None:
        if method == "users.info":
            arrived.set()
            await release.wait()

    fake = HookedSlack()
    async with fake:
        fake.add_user("U0000", "person0")
        fake.before = hold_name_lookups
        target = await start(fake, tmp_path)
        try:
            (event,) = prepare(fake, 1, "ack")
            async with aiohttp.ClientSession() as session:
                await post(session, target.url, event)  # acknowledged (200), or it raises
            await asyncio.wait_for(arrived.wait(), LIMIT_S)  # inside the window
            target.process.kill()
            await target.process.wait()
            target._drain.cancel()
            assert not answered(fake, event)
            release.set()
            target = await start(fake, tmp_path)
            await fake.wait_for(lambda f: answered(f, event), LIMIT_S)
            assert len(fake.bot_replies(event.channel, event.ts)) == 1
        finally:
            release.set()
            await target.stop()
