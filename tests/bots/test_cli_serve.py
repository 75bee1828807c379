"""`teammate serve`, `teammate slack`, `teammate slack manifest` and doctor's Slack checks, as
people run them: the real command in a subprocess, against FakeSlack on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.slack.manifest import BOT_SCOPES
from tests.bots.test_cli import REPO, TIMEOUT_S, cli_env, teammate
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


async def test_serve_answers_a_mention_and_stops_gracefully_on_sigterm(
    fake_slack: FakeSlack, tmp_path: Path, data_dir: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "serve",
        cwd=tmp_path,
        env=slack_env(tmp_path, data_dir, fake_slack) | {"PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await fake_slack.wait_for(lambda fake: fake.socket_connected, TIMEOUT_S)
        posted = fake_slack.seed_message("C1", f"<@{fake_slack.bot_user_id}> hello", user="UA")
        event = {
            "type": "app_mention",
            "user": "UA",
            "text": posted["text"],
            "ts": posted["ts"],
            "channel": "C1",
            "event_ts": posted["ts"],
        }
        await fake_slack.socket_send(fake_slack.event_callback(event), limit_s=TIMEOUT_S)
        await fake_slack.wait_for(
            lambda fake: "scripted model" in json.dumps(fake.bot_replies("C1", posted["ts"])),
            TIMEOUT_S,
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
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 0, err.decode()
    assert "connected as @teammate (Socket Mode)" in err.decode()
    assert "stopped." in err.decode()
