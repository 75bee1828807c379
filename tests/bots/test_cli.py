"""`teammate` as people run it: a subprocess, against the fake Anthropic server.

Each test starts the real command (`python -m bots.cli`) with its own data directory, and the
real `anthropic` SDK talking over 127.0.0.1 to `tests.fakes.anthropic_server`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import (
    FakeAnthropic,
    SSEReply,
    TextOut,
    ToolUseOut,
    error_reply,
    sse,
    text_reply,
)
from tests.storage.conftest import FakeClock
from tests.storage.test_integrity import damage_middle_pages, write_a_conversation

REPO = Path(__file__).resolve().parents[2]
KEY = "test-key-0123456789"
TIMEOUT_S = 180.0  # a hang guard, not a speed check: CI machines are shared and slow (an MCP
# test starts a Python server twice; at load 7 on 2 cores one such `ask` took over 60 s)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=KEY)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def cli_env(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic | None, **extra: str
) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ANTHROPIC_", "TEAMMATE_", "SLACK_", "DISCORD_"))
    }
    env.update(
        TEAMMATE_DATA_DIR=str(data_dir),
        TEAMMATE_MODEL="claude-sonnet-5-5",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        HOME=str(tmp_path),
    )
    if fake is not None:
        env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY=KEY)
    env.update(extra)
    return env


@dataclass
class Done:
    code: int
    out: str
    err: str


async def teammate(*args: str, env: dict[str, str], cwd: Path, stdin: str | None = None) -> Done:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        process.communicate((stdin or "").encode()), timeout=TIMEOUT_S
    )
    assert process.returncode is not None
    return Done(process.returncode, out.decode(), err.decode())


def user_texts(body: dict[str, Any]) -> str:
    """Everything the model was sent in `body`'s messages, as one string."""
    return json.dumps(body["messages"])


# -- ask -----------------------------------------------------------------------------------------


async def test_ask_runs_a_tool_and_a_second_call_continues_the_conversation(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    workspace = tmp_path  # a terminal conversation works where the command is started
    (workspace / "notes.txt").write_text("The password hint is: blue elephant\n")
    fake.add(
        sse(
            TextOut("Let me read it."),
            ToolUseOut("toolu_1", "read", ['{"path": ', '"notes.txt"}']),
            stop_reason="tool_use",
        ),
        text_reply("The notes say: blue elephant."),
    )
    env = cli_env(tmp_path, data_dir, fake)

    first = await teammate(
        "ask", "--conversation", "e2e", "What do my notes say?", env=env, cwd=tmp_path
    )

    assert first.code == 0, first.err
    assert first.out == "The notes say: blue elephant.\n"
    assert first.err.splitlines() == ["⚙ Read notes.txt", first.err.splitlines()[1]]
    assert first.err.splitlines()[1].startswith("  ✓ read ")
    tool_result = fake.bodies[1]["messages"][-1]["content"]
    assert "blue elephant" in json.dumps(tool_result)

    fake.add(text_reply("You asked what your notes say."))
    second = await teammate("ask", "-c", "e2e", "What did I just ask?", env=env, cwd=tmp_path)

    assert second.code == 0, second.err
    assert second.out == "You asked what your notes say.\n"
    sent = user_texts(fake.bodies[2])
    for earlier in ("What do my notes say?", "toolu_1", "The notes say: blue elephant."):
        assert earlier in sent
    assert sent.index("What do my notes say?") < sent.index("What did I just ask?")


async def test_ask_reads_the_prompt_from_stdin(tmp_path: Path, data_dir: Path) -> None:
    env = cli_env(tmp_path, data_dir, None)
    done = await teammate("--model", "scripted", "ask", "-", env=env, cwd=tmp_path, stdin="hi\n")
    assert done.code == 0, done.err
    assert done.out == "This is the scripted model: it answers the same to everything.\n"


async def test_ask_fails_with_one_line_when_the_model_stays_overloaded(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    overloaded = error_reply(529, "overloaded_error", "Overloaded", headers={"retry-after-ms": "1"})
    fake.add(*[overloaded] * 8)
    done = await teammate("ask", "hello", env=cli_env(tmp_path, data_dir, fake), cwd=tmp_path)
    assert done.code == 1
    assert done.out == ""
    assert len(done.err.strip().splitlines()) == 1
    assert "overloaded" in done.err
    assert len(fake.requests) > 1  # retried before giving up


async def test_a_refused_api_key_is_reported_and_never_printed(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    wrong = "sk-ant-wrong-key-abcdef123456"
    env = cli_env(tmp_path, data_dir, fake, ANTHROPIC_API_KEY=wrong)
    done = await teammate("-v", "ask", "hello", env=env, cwd=tmp_path)
    assert done.code == 1
    assert "ANTHROPIC_API_KEY" in done.err
    assert "Traceback" not in done.err
    for text in (done.out, done.err, (data_dir / "teammate.log").read_text()):
        assert wrong not in text


async def test_ask_without_an_api_key_names_the_variable(tmp_path: Path, data_dir: Path) -> None:
    done = await teammate("ask", "hello", env=cli_env(tmp_path, data_dir, None), cwd=tmp_path)
    assert done.code == 2
    assert done.err.count("\n") == 1
    assert "ANTHROPIC_API_KEY is not set" in done.err


async def test_an_invalid_setting_is_one_line_naming_it(tmp_path: Path, data_dir: Path) -> None:
    env = cli_env(tmp_path, data_dir, None, TEAMMATE_MAX_TURNS="0")
    done = await teammate("--model", "scripted", "ask", "hi", env=env, cwd=tmp_path)
    assert done.code == 2
    assert done.err.count("\n") == 1
    assert done.err.startswith("teammate: TEAMMATE_MAX_TURNS")


# -- help and doctor -----------------------------------------------------------------------------


async def test_help_explains_the_commands(tmp_path: Path, data_dir: Path) -> None:
    done = await teammate("--help", env=cli_env(tmp_path, data_dir, None), cwd=tmp_path)
    assert done.code == 0
    for command in ("chat", "ask", "doctor", "--model", "--data-dir"):
        assert command in done.out


async def test_doctor_reports_each_check(tmp_path: Path, data_dir: Path) -> None:
    env = cli_env(tmp_path, data_dir, None)
    done = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)
    assert done.code == 0, done.out + done.err
    lines = done.out.splitlines()
    for name in ("settings", "data dir", "database", "model", "sandbox", "ripgrep", "slack"):
        assert any(line.split(":")[0].split(maxsplit=1)[1] == name for line in lines[:-1]), name
    assert "schema version" in done.out

    missing_key = await teammate("doctor", env=env, cwd=tmp_path)
    assert missing_key.code == 1
    assert "fail  model: claude-sonnet-5-5: ANTHROPIC_API_KEY is not set" in missing_key.out


async def test_doctor_runs_the_full_integrity_check_and_names_the_damage(
    tmp_path: Path, data_dir: Path
) -> None:
    env = cli_env(tmp_path, data_dir, None)
    healthy = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)
    assert "ok    database integrity: no damage found" in healthy.out, healthy.out

    db_path = data_dir / "teammate.db"
    clock = FakeClock()
    await write_a_conversation(db_path, clock)
    damage_middle_pages(db_path)
    damaged = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)

    assert damaged.code == 1
    assert "fail  database: " in damaged.out and "is damaged" in damaged.out
    [integrity] = [line for line in damaged.out.splitlines() if "database integrity" in line]
    assert integrity.startswith("fail  database integrity: ")
    assert "problem" in integrity


async def test_doctor_checks_every_channels_model_and_flags_deprecated_ones(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    config = tmp_path / "teammate.toml"
    config.write_text('[channels."slack:T1:C1"]\nmodel = "claude-opus-4-5"\n')
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config))
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert "ok    model: claude-sonnet-5-5 via" in done.out
    assert "warn  model: claude-opus-4-5 (set in" in done.out and "is deprecated" in done.out
    probed = [r.path for r in fake.requests]
    assert probed == ["/v1/models/claude-sonnet-5-5", "/v1/models/claude-opus-4-5"]


async def test_doctor_probes_the_model_without_generating(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    env = cli_env(tmp_path, data_dir, fake)
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert "ok    model reachable:" in done.out, done.out
    assert [r.method for r in fake.requests] == ["GET"]  # no message was generated

    wrong = cli_env(tmp_path, data_dir, fake, ANTHROPIC_API_KEY="sk-ant-wrong-key-123")
    refused = await teammate("doctor", env=wrong, cwd=tmp_path)
    assert refused.code == 1
    assert "fail  model reachable:" in refused.out
    assert "sk-ant-wrong-key-123" not in refused.out + refused.err


# -- chat ----------------------------------------------------------------------------------------


@dataclass
class Chat:
    """A running `teammate chat`, its output collected as it comes."""

    process: asyncio.subprocess.Process
    out: str = ""
    err: str = ""
    readers: list[asyncio.Task[None]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def until(self, what: str, condition: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(f"waited for {what}; out={self.out!r} err={self.err!r}") from None


async def start_chat(env: dict[str, str], cwd: Path, *args: str) -> Chat:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "chat",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    chat = Chat(process)

    async def pump(stream: asyncio.StreamReader | None, name: str) -> None:
        assert stream is not None
        while chunk := await stream.read(4096):
            setattr(chat, name, getattr(chat, name) + chunk.decode())
            chat.changed.set()
        chat.changed.set()

    chat.readers = [
        asyncio.create_task(pump(process.stdout, "out")),
        asyncio.create_task(pump(process.stderr, "err")),
    ]
    return chat


async def finish(chat: Chat) -> int:
    try:
        code = await asyncio.wait_for(chat.process.wait(), TIMEOUT_S)
        await asyncio.gather(*chat.readers)
    finally:
        if chat.process.returncode is None:
            chat.process.kill()
    return code


async def test_chat_answers_lines_and_shows_usage(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    fake.add(text_reply("Hello there!", input_tokens=100, output_tokens=7))
    chat = await start_chat(cli_env(tmp_path, data_dir, fake), tmp_path)
    await chat.send("hello")
    await chat.until("the answer", lambda: "Hello there!\n" in chat.out)
    await chat.send("/usage")
    await chat.until("the usage", lambda: "total" in chat.err)
    assert "107 tokens" in chat.err  # input 100 + output 7
    await chat.send("/exit")
    assert await finish(chat) == 0
    assert chat.out == "Hello there!\n"


async def test_ctrl_c_stops_the_answer_but_not_the_program(
    fake: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    slow: SSEReply = text_reply("word " * 400, chunk_size=5)
    slow.event_delay_s = 0.02  # about 8 s in all: far longer than the test waits
    fake.add(slow)
    chat = await start_chat(cli_env(tmp_path, data_dir, fake), tmp_path)
    await chat.send("tell me a long story")
    await chat.until("the answer to start", lambda: "word word" in chat.out)

    chat.process.send_signal(signal.SIGINT)
    await chat.until("the stop", lambda: "■ Stopped by" in chat.err)
    assert chat.process.returncode is None  # still running

    fake.add(text_reply("A short one then."))
    await chat.send("a short one please")
    await chat.until("the second answer", lambda: "A short one then." in chat.out)
    # The stopped answer is not replayed to the model; the new question is.
    assert "a short one please" in user_texts(fake.bodies[-1])
    await chat.send("/exit")
    assert await finish(chat) == 0


async def test_chat_at_end_of_piped_input_finishes_the_answer(
    tmp_path: Path, data_dir: Path
) -> None:
    env = cli_env(tmp_path, data_dir, None)
    done = await teammate("--model", "scripted", "chat", env=env, cwd=tmp_path, stdin="hi\n")
    assert done.code == 0, done.err
    assert done.out == "This is the scripted model: it answers the same to everything.\n"
