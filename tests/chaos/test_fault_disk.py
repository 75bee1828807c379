"""Disk and database faults (issue 13) under the assembled Slack app on SQLite: the database
file locked by another program, the data directory's disk full, a read-only data directory.
Each gives a clear error in the thread and the log, leaves the history whole, and the service
answers again once the fault clears."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bots.app import open_app
from bots.settings import SettingsError
from storage.base import ConversationStore
from storage.sqlite import SqliteStore
from tests.chaos.fault_kit import (
    LogCapture,
    app_settings,
    fake_anthropic,
    fake_slack,
    slack_app,
)
from tests.fakes.anthropic_server import text_reply
from tests.fakes.slack_server import FakeSlack

STORE_TEXT = "couldn't save"


@contextmanager
def captured_logs() -> Iterator[LogCapture]:
    capture = LogCapture()
    root = logging.getLogger()
    root.addHandler(capture)
    try:
        yield capture
    finally:
        root.removeHandler(capture)


def _everything_shown(slack: FakeSlack) -> str:
    return json.dumps([call.args for call in slack.calls], ensure_ascii=False)


async def _integrity(store: ConversationStore) -> list[str]:
    assert isinstance(store, SqliteStore)
    return await store.integrity_check()


def _fill(filler: Path) -> None:
    """Write zeros until the disk refuses another byte."""
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path` (root only: skipped elsewhere)."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def test_a_database_locked_by_another_program_is_said_and_then_answered(
    tmp_path: Path,
) -> None:
    async with (
        fake_slack() as slack,
        fake_anthropic() as model_api,
        slack_app(slack, model_api, tmp_path, busy_timeout_s=0.3) as app,
    ):
        model_api.add(text_reply("first answer"))
        ts = await app.mention("first question")
        await app.settle()

        # Another program holds the database. Its lock is taken from another thread, as
        # another process would: taken on the event loop, it would wait (busy_timeout) on
        # a write of ours in flight that needs the loop to commit, and fail after 5 s.
        other = sqlite3.connect(
            app.settings.database_path, isolation_level=None, check_same_thread=False
        )
        with captured_logs() as logs:
            await asyncio.to_thread(other.execute, "BEGIN EXCLUSIVE")
            try:
                await app.mention("while locked", thread_ts=ts)
                await app.settle()
            finally:
                await asyncio.to_thread(other.execute, "ROLLBACK")
                other.close()
        shown = _everything_shown(slack)
        assert STORE_TEXT in shown and "send it again" in shown
        assert "Traceback" not in shown
        assert "database is locked" in logs.text

        model_api.add(text_reply("answer after the lock"))
        await app.mention("after the lock", thread_ts=ts)
        await app.settle()
        assert "answer after the lock" in json.dumps(slack.bot_replies("C1", ts))
        assert await _integrity(app.store) == []


async def test_a_full_disk_is_said_nothing_is_corrupted_and_service_resumes(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "data", "2m") as data:
        async with (
            fake_slack() as slack,
            fake_anthropic() as model_api,
            slack_app(slack, model_api, data, busy_timeout_s=0.3) as app,
        ):
            model_api.add(text_reply("first answer"))
            ts = await app.mention("first question")
            await app.settle()

            filler = data / "filler"
            with captured_logs() as logs:
                # The disk fills up while an answer streams in: it cannot be stored.
                slow = text_reply("x" * 300_000, chunk_size=30_000)
                slow.event_delay_s = 0.1
                model_api.add(slow)
                await app.mention("write a long answer", thread_ts=ts)
                while len(model_api.requests) < 2:  # noqa: ASYNC110 (the fake's own list)
                    await asyncio.sleep(0.01)
                _fill(filler)
                try:
                    await app.settle()
                    # Still full: the next message cannot even be stored.
                    await app.mention("while the disk is full", thread_ts=ts)
                    await app.settle()
                finally:
                    filler.unlink()
            shown = _everything_shown(slack)
            assert "couldn't save this answer (the disk is full" in shown
            assert "couldn't save your message (the disk is full" in shown
            assert "Traceback" not in shown
            assert "database or disk is full" in logs.text

            model_api.add(text_reply("answer with room again"))
            await app.mention("room again", thread_ts=ts)
            await app.settle()
            assert "answer with room again" in json.dumps(slack.bot_replies("C1", ts))
            assert await _integrity(app.store) == []


async def test_a_read_only_data_directory_is_one_clear_line_at_start(tmp_path: Path) -> None:
    with small_disk(tmp_path / "data", "1m") as data:
        remount = ["mount", "-o", "remount,ro", str(data)]
        await asyncio.to_thread(subprocess.run, remount, check=True)
        async with fake_slack() as slack, fake_anthropic() as model_api:
            settings = app_settings(slack, model_api, data)
            with pytest.raises(SettingsError) as raised:
                async with open_app(settings, platform_rules="Plain text."):
                    pass
    message = str(raised.value)
    assert "\n" not in message and "read-only" in message.lower()
