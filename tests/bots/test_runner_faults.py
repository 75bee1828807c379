"""Issue 24's reproduced faults in the runner: each test failed before its fix."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bots.errors import is_storage_failure, storage_failure_text
from bots.surface.contract import Notice, SurfaceEvent
from core.messages import Message, UserMessage
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import BOB, KEY, history, incoming, make_runner
from tests.fakes.recording_surface import RecordingSurface


def _said(message: Message) -> str:
    return message.text().rsplit("\n", 1)[-1]


class ClosingGate(RecordingSurface):
    """A surface whose close blocks until released (a Slack surface's final flush)."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.closing = asyncio.Event()
        self.release = asyncio.Event()

    async def close(self) -> None:
        self.closing.set()
        await self.release.wait()
        await super().close()


async def test_a_batch_whose_run_cannot_start_is_answered_in_order_without_a_restart(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R4: the follow-up run takes two queued messages and `start_run` fails (a locked
    database): the lead is told, and the other is answered next, before any newer message,
    and `wait_all()` returns."""
    model = ScriptedModel([Reply(text="first answer"), Reply(text="third answer")])
    runner = make_runner(store, tmp_path, model)
    real_start_run = store.start_run
    calls = 0

    async def start_run(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise sqlite3.OperationalError("database is locked")
        return await real_start_run(*args, **kwargs)

    monkeypatch.setattr(store, "start_run", start_run)
    gated = ClosingGate()
    await runner.submit(incoming("first"), gated)
    await asyncio.wait_for(gated.closing.wait(), 5)
    second, third = RecordingSurface("second"), RecordingSurface("third")
    await runner.submit(incoming("second", author=BOB), second)
    await runner.submit(incoming("third"), third)
    gated.release.set()
    await asyncio.wait_for(runner.wait_all(), 5)

    assert any(f.error_text and "locked" in f.error_text for f in second.finished())
    assert [f.outcome for f in third.finished()] == ["done"]
    assert [_said(m) for m in await history(store)] == [
        "first",
        "first answer",
        "third",
        "third answer",
    ]
    asked = [_said(m) for m in model.requests[1].messages if isinstance(m, UserMessage)]
    assert asked == ["first", "third"]
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    assert await store.pending(conversation.id) == []  # nothing left for a restart to answer
    assert second.closed == 1 and third.closed == 1


class TimesOutOnNotices(RecordingSurface):
    """A surface whose platform call for a notice times out (`asyncio.timeout`, as aiohttp's
    request timer under slack_sdk and discord.py does)."""

    def __init__(self) -> None:
        super().__init__("times-out")
        self.timeouts = 0

    async def emit(self, event: SurfaceEvent) -> None:
        if isinstance(event, Notice):
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(1)
            except TimeoutError:
                self.timeouts += 1
                raise
        await super().emit(event)


async def test_a_surface_timing_out_cancels_neither_the_driver_nor_the_sender(
    store: SqliteStore, tmp_path: Path
) -> None:
    """R1: the surface's timeout fires on the task that ran its first step: before, that was
    the caller's (the submitting handler for "queued", the driver for "read it"), which was
    cancelled instead of the surface's call."""
    model = ScriptedModel([Reply(text="first answer"), Reply(text="second answer")])
    runner = make_runner(store, tmp_path, model)
    gated = ClosingGate()
    await runner.submit(incoming("first"), gated)
    await asyncio.wait_for(gated.closing.wait(), 5)
    second, third = RecordingSurface("second"), TimesOutOnNotices()
    await runner.submit(incoming("second", author=BOB), second)
    await runner.submit(incoming("third"), third)  # its "queued" notice times out
    await asyncio.sleep(0.05)  # past the timeout: the submitting task is still alive
    gated.release.set()
    await asyncio.wait_for(runner.wait_all(), 5)

    assert [f.outcome for f in second.finished()] == ["done"]
    assert [_said(m) for m in await history(store)] == [
        "first",
        "first answer",
        "second",
        "third",
        "second answer",
    ]
    assert third.timeouts == 2  # "queued", then "read it": each its own surface's failure


async def test_a_closed_sqlite_connection_is_a_storage_failure(tmp_path: Path) -> None:
    """R2 (in part): aiosqlite's `ValueError('Connection closed')` (its worker thread is
    gone) tells people the database is unavailable, not the generic text."""
    opened = await SqliteStore.open(tmp_path / "closed.db")
    writer = opened._writer
    await opened.close()
    with pytest.raises(ValueError) as raised:
        await writer.execute("SELECT 1")
    assert is_storage_failure(raised.value)
    text = storage_failure_text(raised.value, "ref1", accepting=True)
    assert "the database is unavailable" in text
    assert not is_storage_failure(ValueError("invalid literal for int()"))
