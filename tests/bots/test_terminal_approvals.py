"""Approvals in the terminal: `chat` asks y/n and the next typed line answers (any other line
is a message, steered into the waiting run); a batch asks each call; a stop while waiting ends
the run; nobody answering times out; a restart while waiting asks again and continues the run;
`ask` reads the answer from the terminal, and with no terminal denies and says so."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bots.app import App
from bots.platforms.terminal.approvals import QUESTION, TerminalApprovals
from bots.platforms.terminal.surface import (
    StdinLines,
    TerminalSurfaces,
    local_author,
    run_ask,
    run_chat,
)
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import ToolResultMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.approval_tool import DangerTool
from tests.bots.runner_helpers import make_runner
from tests.bots.test_terminal import eventually

APPROVALS: dict[str, Any] = {"tools": ["danger"], "timeout_s": 600}
KEY = "terminal:t"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with SqliteStore.open(tmp_path / "teammate.db") as opened:
        yield opened


def app_of(runner: ConversationRunner) -> App:
    return cast(App, SimpleNamespace(runner=runner))


def results(model: ScriptedModel) -> list[ToolResultMessage]:
    return [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]


class Chat:
    """`teammate chat` on a pipe, typed into interactively."""

    def __init__(self, runner: ConversationRunner) -> None:
        self.runner = runner
        self.read_end, self.write_end = os.pipe()
        self.out, self.err = io.StringIO(), io.StringIO()
        self.approvals = TerminalApprovals(runner.approvals, KEY, local_author(), self.err)
        self.approvals.interactive = True
        self.task = asyncio.create_task(
            run_chat(
                app_of(runner),
                "t",
                lines=StdinLines(self.read_end),
                out=self.out,
                err=self.err,
                interactive=True,
                model_id="scripted",
                approvals=self.approvals,
            )
        )

    def type(self, line: str) -> None:
        os.write(self.write_end, line.encode() + b"\n")

    async def asked(self, times: int = 1) -> None:
        await eventually("the question", lambda: self.err.getvalue().count(QUESTION) >= times, 30)

    async def end(self) -> None:
        os.close(self.write_end)
        assert await asyncio.wait_for(self.task, 30) == 0
        os.close(self.read_end)


def runner_with(
    store: SqliteStore, tmp_path: Path, replies: Sequence[Reply], tool: DangerTool, **extra: Any
) -> tuple[ConversationRunner, ScriptedModel]:
    model = ScriptedModel(list(replies))
    return make_runner(store, tmp_path, model, [tool], approvals=APPROVALS | extra), model


@pytest.mark.parametrize(("typed", "ran"), [("y", ["make clean"]), ("n", [])])
async def test_chat_asks_and_the_typed_answer_decides(
    store: SqliteStore, tmp_path: Path, typed: str, ran: list[str]
) -> None:
    tool = DangerTool()
    runner, model = runner_with(
        store,
        tmp_path,
        [Reply(tool_calls=[call("danger", {"command": "make clean"})]), Reply(text="ok")],
        tool,
    )
    chat = Chat(runner)
    chat.type("clean the build")
    await chat.asked()
    chat.type(typed)
    await eventually("the answer", lambda: "ok" in chat.out.getvalue(), 30)
    await chat.end()
    await runner.close()
    assert tool.ran == ran
    assert (
        "make clean" in chat.err.getvalue() and "Waiting for your approval" in chat.err.getvalue()
    )
    assert results(model)[0].is_error is (not ran)
    audit = await store.audit_entries(limit=5, action="approval.decision")
    assert [e.origin for e in audit] == ["terminal"]


async def test_chat_asks_each_call_of_a_batch_and_a_line_meanwhile_is_steered(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = DangerTool()
    batch = [call("danger", {"command": "first"}), call("danger", {"command": "second"})]
    runner, model = runner_with(store, tmp_path, [Reply(tool_calls=batch), Reply(text="ok")], tool)
    chat = Chat(runner)
    chat.type("two things")
    await chat.asked()
    chat.type("mind the logs")  # not an answer: a message, steered into the waiting run
    await chat.asked(2)  # the question again
    chat.type("y")
    await chat.asked(3)  # the second call's
    chat.type("n")
    await eventually("the answer", lambda: "ok" in chat.out.getvalue(), 30)
    await chat.end()
    await runner.close()
    assert tool.ran == ["first"]
    assert [r.is_error for r in results(model)] == [False, True]
    assert len(model.requests) == 2 and "mind the logs" in model.requests[-1].messages[-1].text()


async def test_stop_while_waiting_ends_the_run(store: SqliteStore, tmp_path: Path) -> None:
    tool = DangerTool()
    runner, _model = runner_with(
        store, tmp_path, [Reply(tool_calls=[call("danger", {"command": "x"})])], tool
    )
    chat = Chat(runner)
    chat.type("go")
    await chat.asked()
    chat.type("/stop")
    await eventually("the stop", lambda: "Cancelled" in chat.err.getvalue(), 30)
    await chat.end()
    await runner.close()
    assert tool.ran == []
    assert await store.pending_approvals(limit=5) == []  # cancelled, not left pending


async def test_nobody_answering_times_out(store: SqliteStore, tmp_path: Path) -> None:
    tool = DangerTool()
    runner, model = runner_with(
        store,
        tmp_path,
        [Reply(tool_calls=[call("danger", {"command": "x"})]), Reply(text="ok")],
        tool,
        timeout_s=1,
    )
    chat = Chat(runner)
    chat.type("go")
    await eventually("the answer", lambda: "ok" in chat.out.getvalue(), 30)
    await chat.end()
    await runner.close()
    assert tool.ran == [] and "timed out" in results(model)[0].text()
    assert "Nobody approved this in time" in chat.err.getvalue()


async def test_a_restart_while_waiting_asks_again_and_continues_the_run(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = DangerTool()
    runner, first = runner_with(
        store, tmp_path, [Reply(tool_calls=[call("danger", {"command": "migrate"})])], tool
    )
    chat = Chat(runner)
    chat.type("migrate")
    await chat.asked()
    await runner.close()  # Teammate stops while the question is open
    await chat.end()

    after = ScriptedModel([Reply(text="migrated")])
    surfaces = TerminalSurfaces(err=io.StringIO(), current_key=KEY)
    restarted = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path, approvals=APPROVALS),
        model_factory=lambda _model_id: after,
        toolset_factory=lambda _channel: [tool],
        platform_rules="Plain text only.",
        surfaces=surfaces,
    )
    again = Chat(restarted)
    surfaces.approvals = again.approvals  # as `teammate chat` wires it
    await again.asked()  # the continued run asks again
    again.type("y")
    await eventually("the tool", lambda: tool.ran == ["migrate"], 30)
    await restarted.wait(KEY)
    await again.end()
    await restarted.close()
    assert len(first.requests) == 1 and len(after.requests) == 1  # the call is not asked for
    assert results(after)[0].is_error is False


async def test_ask_reads_the_answer_from_the_terminal(store: SqliteStore, tmp_path: Path) -> None:
    tool = DangerTool()
    runner, _model = runner_with(
        store,
        tmp_path,
        [Reply(tool_calls=[call("danger", {"command": "ls"})]), Reply(text="Listed.")],
        tool,
    )
    answers = iter(["maybe\n", "y\n"])

    async def read_line() -> str | None:
        return next(answers)

    out, err = io.StringIO(), io.StringIO()
    status = await run_ask(app_of(runner), "t", "list", out=out, err=err, read_line=read_line)
    await runner.close()
    assert status == 0 and tool.ran == ["ls"]
    assert "Please answer y, n or a." in err.getvalue()
    assert out.getvalue().strip() == "Listed."


async def test_ask_without_a_terminal_denies_and_says_so(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = DangerTool()
    runner, model = runner_with(
        store,
        tmp_path,
        [Reply(tool_calls=[call("danger", {"command": "rm x"})]), Reply(text="Could not.")],
        tool,
    )
    out, err = io.StringIO(), io.StringIO()
    status = await run_ask(app_of(runner), "t", "remove x", out=out, err=err)
    await runner.close()
    assert status == 0 and tool.ran == []
    assert "No terminal to ask for approval, so it was denied" in err.getvalue()
    [result] = results(model)
    assert result.is_error and "denied" in result.text()
