"""Crash between a Discord `/ask`'s defer and the store (issue 13): the real `teammate serve`
with Discord against FakeDiscord on 127.0.0.1, SIGKILLed while it starts the answer's thread
(after "Teammate is thinking…" was shown, before the question reached the store). Discord
never sends an interaction again, so the process that starts next must answer it: written
down before the defer, replayed at start, answered once in the response that was waiting."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.bots.platforms.discord.test_cli_discord import discord_env, read_until
from tests.bots.test_cli import TIMEOUT_S
from tests.bots.test_cli_serve import start_serve, stop_serve
from tests.fakes.discord_server import FakeDiscord, RecordedRequest

QUESTION = "what survives a crash?"
ANSWER = "This is the scripted model"  # what `TEAMMATE_MODEL=scripted` says to everything
STARTED = "Ctrl-C or SIGTERM stops."


class KillingDiscord(FakeDiscord):
    """Kills `victim` (SIGKILL) when it asks to start a thread from a message, once."""

    victim: asyncio.subprocess.Process | None = None

    async def _thread_from_message(
        self, r: RecordedRequest, channel_id: str, message_id: str
    ) -> web.Response:
        victim, self.victim = self.victim, None
        if victim is not None:
            victim.kill()
            await victim.wait()
            return web.json_response({"message": "gone"}, status=500)
        return await super()._thread_from_message(r, channel_id, message_id)


@pytest.fixture
async def fake() -> AsyncIterator[KillingDiscord]:
    server = KillingDiscord()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def stored_questions(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "teammate.db") as db:
        (count,) = db.execute(
            "SELECT count(*) FROM messages WHERE role = 'user' AND body LIKE ?",
            (f"%{QUESTION}%",),
        ).fetchone()
    return int(count)


async def test_an_ask_killed_between_its_defer_and_the_store_is_answered_after_a_restart(
    fake: KillingDiscord, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    general = fake.add_channel(next(iter(fake.guilds)), name="general")["id"]
    env = discord_env(tmp_path, data_dir, fake)
    first = await start_serve(env, tmp_path)
    fake.victim = first
    try:
        await read_until(first, STARTED)
        ask = fake.slash_command("ask", {"prompt": QUESTION}, channel_id=general)
        await fake.dispatch("INTERACTION_CREATE", ask)
        await asyncio.wait_for(first.wait(), TIMEOUT_S)
    finally:
        if first.returncode is None:
            first.kill()
        await first.communicate()
    assert first.returncode == -signal.SIGKILL
    (thinking,) = fake.channel_messages(general)  # deferred: "thinking…" shows, nothing else
    waiting = str(thinking["id"])
    assert waiting not in fake.channels  # its thread was never started
    assert not (data_dir / "teammate.db").exists() or stored_questions(data_dir) == 0

    second = await start_serve(env, tmp_path)
    try:
        await read_until(second, STARTED)
        await fake.wait_for(
            lambda: ANSWER in fake.messages[waiting]["content"] and waiting in fake.channels,
            TIMEOUT_S,
        )
    finally:
        err = await stop_serve(second)
    assert second.returncode == 0, err
    assert stored_questions(data_dir) == 1
    shown = [m for c in (general, waiting) for m in fake.channel_messages(c)]
    assert sum(ANSWER in m["content"] for m in shown) == 1  # answered once, where it waited
    assert not list((data_dir / "discord-asks").glob("*.jsonl"))  # nothing left to replay
