"""`teammate serve`, `teammate slack`, `teammate slack manifest` and doctor's Slack checks, as
people run them: the real command in a subprocess, against FakeSlack on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.platforms.slack.manifest import BOT_SCOPES
from tests.bots.test_cli import KEY, REPO, TIMEOUT_S, cli_env, teammate
from tests.fakes.anthropic_server import FakeAnthropic, SSEReply, text_reply
from tests.fakes.slack_server import FakeSlack


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def slack_env(tmp_path: Path, data_dir: Path, fake: FakeSlack, **extra: str) -> dict[str, str]:
    slack = {
        "TEAMMATE_MODEL": "scripted",
        "SLACK_BOT_TOKEN": fake.bot_token,
        "SLACK_APP_TOKEN": fake.app_token,
        "SLACK_API_URL": fake.api_url,
    }
    return cli_env(tmp_path, data_dir, None, **(slack | extra))


async def test_serve_with_no_credentials_says_what_to_set(tmp_path: Path, data_dir: Path) -> None:
    done = await teammate("serve", env=cli_env(tmp_path, data_dir, None), cwd=tmp_path)
    assert done.code == 2
    assert done.out == ""
    for needed in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "teammate chat"):
        assert needed in done.err
    assert len(done.err.splitlines()) <= 8


async def test_slack_names_each_missing_credential(tmp_path: Path, data_dir: Path) -> None:
    env = cli_env(tmp_path, data_dir, None, TEAMMATE_MODEL="scripted", SLACK_BOT_TOKEN="xoxb-1")
    socket = await teammate("slack", env=env, cwd=tmp_path)
    assert socket.code == 2
    assert "SLACK_APP_TOKEN is not set" in socket.err
    assert "xoxb-1" not in socket.err

    http = await teammate("slack", "--http", env=env, cwd=tmp_path)
    assert http.code == 2
    assert "SLACK_SIGNING_SECRET is not set" in http.err

    half = await teammate("serve", env=env, cwd=tmp_path)
    assert half.code == 2
    assert "SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)" in half.err


async def test_manifest_prints_the_app_with_the_configured_command(
    tmp_path: Path, data_dir: Path
) -> None:
    env = cli_env(tmp_path, data_dir, None, TEAMMATE_SLACK__COMMAND="/tm")
    done = await teammate("slack", "manifest", env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    app = json.loads(done.out)
    assert app["features"]["slash_commands"][0]["command"] == "/tm"
    assert app["settings"]["socket_mode_enabled"] is True
    assert app["oauth_config"]["scopes"]["bot"] == list(BOT_SCOPES)

    url = "https://bot.example.com/slack/events"
    http = await teammate("slack", "manifest", "--request-url", url, env=env, cwd=tmp_path)
    assert json.loads(http.out)["settings"]["event_subscriptions"]["request_url"] == url


async def test_doctor_names_missing_scopes_and_never_prints_a_token(
    fake_slack: FakeSlack, tmp_path: Path, data_dir: Path
) -> None:
    fake_slack.scopes = "chat:write,commands,app_mentions:read"
    env = slack_env(tmp_path, data_dir, fake_slack)
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert done.code == 1, done.out
    assert "ok    slack: SLACK_BOT_TOKEN works: @teammate (UBOT)" in done.out
    (scopes,) = [line for line in done.out.splitlines() if line.startswith("fail  slack scopes")]
    missing = [s for s in BOT_SCOPES if s not in ("chat:write", "commands", "app_mentions:read")]
    assert f"missing {', '.join(missing)}:" in scopes
    assert "ok    slack app token" in done.out
    assert fake_slack.bot_token not in done.out + done.err
    assert fake_slack.app_token not in done.out + done.err

    fake_slack.scopes = ",".join(BOT_SCOPES)
    healthy = await teammate("doctor", env=env, cwd=tmp_path)
    assert healthy.code == 0, healthy.out
    assert "ok    slack scopes: every scope Teammate uses is granted" in healthy.out


async def test_doctor_reports_a_refused_token_by_slacks_error_name(
    fake_slack: FakeSlack, tmp_path: Path, data_dir: Path
) -> None:
    env = slack_env(
        tmp_path,
        data_dir,
        fake_slack,
        SLACK_BOT_TOKEN="xoxb-wrong-secret-value",
        SLACK_APP_TOKEN="xapp-wrong-secret-value",
    )
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert done.code == 1
    assert "fail  slack: auth.test at" in done.out
    assert "invalid_auth" in done.out
    assert "wrong-secret-value" not in done.out + done.err


async def start_serve(env: dict[str, str], cwd: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "serve",
        *args,
        cwd=cwd,
        env=env | {"PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def mention(fake: FakeSlack, text: str) -> str:
    """A person mentions the bot in C1 (Socket Mode); the thread's ts."""
    posted = fake.seed_message("C1", f"<@{fake.bot_user_id}> {text}", user="UA")
    event = {
        "type": "app_mention",
        "user": "UA",
        "text": posted["text"],
        "ts": posted["ts"],
        "channel": "C1",
        "event_ts": posted["ts"],
    }
    await fake.socket_send(fake.event_callback(event), limit_s=TIMEOUT_S)
    return str(posted["ts"])


async def stop_serve(process: asyncio.subprocess.Process) -> str:
    """SIGTERM, then wait for the exit; stderr."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    _out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    return err.decode()


def outcomes(data_dir: Path) -> list[str]:
    with sqlite3.connect(data_dir / "teammate.db") as db:
        return [str(row[0]) for row in db.execute("SELECT outcome FROM runs ORDER BY id")]


async def test_serve_answers_a_mention_and_stops_gracefully_on_sigterm(
    fake_slack: FakeSlack, tmp_path: Path, data_dir: Path
) -> None:
    process = await start_serve(slack_env(tmp_path, data_dir, fake_slack), tmp_path)
    try:
        await fake_slack.wait_for(lambda fake: fake.socket_connected, TIMEOUT_S)
        ts = await mention(fake_slack, "hello")
        await fake_slack.wait_for(
            lambda fake: "scripted model" in json.dumps(fake.bot_replies("C1", ts)), TIMEOUT_S
        )
        # The slash command works in the same process (Socket Mode envelope).
        ack = await fake_slack.socket_send(
            {
                "command": "/teammate",
                "text": "usage",
                "user_id": "UA",
                "user_name": "ua",
                "channel_id": "C1",
                "team_id": fake_slack.team_id,
            },
            type="slash_commands",
            limit_s=TIMEOUT_S,
        )
        assert "1 answer" in json.dumps(ack)
    finally:
        err = await stop_serve(process)
    assert process.returncode == 0, err
    assert "connected as @teammate (Socket Mode)" in err
    assert "stopped." in err


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=KEY)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def slow_answer(text: str, event_delay_s: float) -> SSEReply:
    reply = text_reply(text, chunk_size=4)
    reply.event_delay_s = event_delay_s
    return reply


async def test_sigterm_lets_the_answer_in_progress_finish(
    fake_slack: FakeSlack, anthropic: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    anthropic.add(slow_answer("Finishing this answer before going away.", 0.3))
    env = slack_env(tmp_path, data_dir, fake_slack) | {
        "TEAMMATE_MODEL": "claude-sonnet-5-5",
        "ANTHROPIC_BASE_URL": anthropic.url,
        "ANTHROPIC_API_KEY": KEY,
    }
    process = await start_serve(env, tmp_path)
    try:
        await fake_slack.wait_for(lambda fake: fake.socket_connected, TIMEOUT_S)
        ts = await mention(fake_slack, "say something slowly")
        await fake_slack.wait_for(lambda fake: bool(fake.bot_replies("C1", ts)), TIMEOUT_S)
        assert outcomes(data_dir) == ["running"]
    finally:
        err = await stop_serve(process)
    assert process.returncode == 0, err
    assert "Finishing this answer before going away." in json.dumps(
        fake_slack.bot_replies("C1", ts)
    )
    assert outcomes(data_dir) == ["done"]


async def test_sigterm_stops_an_answer_that_outlasts_the_grace_period(
    fake_slack: FakeSlack, anthropic: FakeAnthropic, tmp_path: Path, data_dir: Path
) -> None:
    anthropic.add(slow_answer("This answer takes far too long to write. " * 5, 0.5))
    env = slack_env(tmp_path, data_dir, fake_slack) | {
        "TEAMMATE_MODEL": "claude-sonnet-5-5",
        "ANTHROPIC_BASE_URL": anthropic.url,
        "ANTHROPIC_API_KEY": KEY,
    }
    process = await start_serve(env, tmp_path, "--grace", "0")
    try:
        await fake_slack.wait_for(lambda fake: fake.socket_connected, TIMEOUT_S)
        ts = await mention(fake_slack, "write a lot")
        await fake_slack.wait_for(lambda fake: bool(fake.bot_replies("C1", ts)), TIMEOUT_S)
    finally:
        err = await stop_serve(process)
    assert process.returncode == 0, err
    assert outcomes(data_dir) == ["aborted"]  # recorded as stopped, not left running
    assert "black_square_for_stop" in fake_slack.reactions("C1", ts)
