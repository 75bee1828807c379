"""Approvals in the terminal: `chat` asks y/n and the next typed line answers; `ask` reads
the answer from the terminal, and with no terminal denies and says so."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from bots.app import App
from bots.platforms.terminal.approvals import QUESTION
from bots.platforms.terminal.surface import StdinLines, run_ask, run_chat
from bots.runner import ConversationRunner
from core.messages import ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.approval_tool import DangerTool
from tests.bots.runner_helpers import make_runner
from tests.bots.test_terminal import eventually

APPROVALS = {"tools": ["danger"], "timeout_s": 600}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with SqliteStore.open(tmp_path / "teammate.db") as opened:
        yield opened


def app_of(runner: ConversationRunner) -> App:
    return cast(App, SimpleNamespace(runner=runner))


def results(model: ScriptedModel) -> list[ToolResultMessage]:
    return [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]


async def chat_with(runner: ConversationRunner, typed: bytes, err: io.StringIO) -> str:
    """A chat on a pipe, typed into interactively: a message, then the answer to its question.
    What the chat wrote on stdout."""
    read_end, write_end = os.pipe()
    out = io.StringIO()
    chat = asyncio.create_task(
        run_chat(
            app_of(runner),
            "t",
            lines=StdinLines(read_end),
            out=out,
            err=err,
            interactive=True,
            model_id="scripted",
        )
    )
    try:
        os.write(write_end, b"clean the build\n")
        await eventually("the question", lambda: QUESTION in err.getvalue(), 30)
        os.write(write_end, typed)
        await eventually("the answer", lambda: "ok" in out.getvalue(), 30)
    finally:
        os.close(write_end)
    assert await asyncio.wait_for(chat, 30) == 0
    os.close(read_end)
    return out.getvalue()


@pytest.mark.parametrize(("typed", "ran"), [(b"y\n", ["make clean"]), (b"n\n", [])])
async def test_chat_asks_and_the_typed_answer_decides(
    store: SqliteStore, tmp_path: Path, typed: bytes, ran: list[str]
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "make clean"})]), Reply(text="ok")]
    )
    runner = make_runner(store, tmp_path, model, [tool], approvals=APPROVALS)
    err = io.StringIO()
    await chat_with(runner, typed, err)
    await runner.close()
    assert tool.ran == ran
    assert "make clean" in err.getvalue() and "Waiting for your approval" in err.getvalue()
    [result] = results(model)
    assert result.is_error is (not ran)
    audit = await store.audit_entries(limit=5, action="approval.decision")
    assert [e.origin for e in audit] == ["terminal"]


async def test_ask_reads_the_answer_from_the_terminal(store: SqliteStore, tmp_path: Path) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "ls"})]), Reply(text="Listed.")]
    )
    runner = make_runner(store, tmp_path, model, [tool], approvals=APPROVALS)
    asked: list[str] = []

    async def read_line() -> str | None:
        asked.append("?")
        return "y\n"

    out, err = io.StringIO(), io.StringIO()
    status = await run_ask(app_of(runner), "t", "list", out=out, err=err, read_line=read_line)
    await runner.close()
    assert status == 0 and asked == ["?"] and tool.ran == ["ls"]
    assert out.getvalue().strip() == "Listed."


async def test_ask_without_a_terminal_denies_and_says_so(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = DangerTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("danger", {"command": "rm x"})]), Reply(text="Could not.")]
    )
    runner = make_runner(store, tmp_path, model, [tool], approvals=APPROVALS)
    out, err = io.StringIO(), io.StringIO()
    status = await run_ask(app_of(runner), "t", "remove x", out=out, err=err)
    await runner.close()
    assert status == 0 and tool.ran == []
    assert "No terminal to ask for approval, so it was denied" in err.getvalue()
    [result] = results(model)
    assert result.is_error and "denied" in result.text()
