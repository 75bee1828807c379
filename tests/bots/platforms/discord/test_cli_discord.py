"""`teammate discord`, `teammate discord invite`, doctor's Discord checks and `teammate serve`
with Discord (alone, and beside Slack), as people run them: the real command in a subprocess,
against FakeDiscord (and FakeSlack) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import discord
import pytest

from bots.platforms.discord.platform import bot_permissions
from tests.bots.test_cli import TIMEOUT_S, cli_env, teammate
from tests.bots.test_cli_serve import mention, start_serve, stop_serve
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord
from tests.fakes.slack_server import FakeSlack

README = Path(__file__).resolve().parents[4] / "README.md"


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def discord_env(tmp_path: Path, data_dir: Path, fake: FakeDiscord, **extra: str) -> dict[str, str]:
    settings = {
        "TEAMMATE_MODEL": "scripted",
        "DISCORD_BOT_TOKEN": BOT_TOKEN,
        "DISCORD_API_URL": fake.api_base,
        "DISCORD_GATEWAY_URL": fake.gateway_url,
    }
    return cli_env(tmp_path, data_dir, None, **(settings | extra))


async def test_discord_without_a_token_names_it_in_one_line(tmp_path: Path, data_dir: Path) -> None:
    done = await teammate(
        "discord", env=cli_env(tmp_path, data_dir, None, TEAMMATE_MODEL="scripted"), cwd=tmp_path
    )
    assert done.code == 2
    (line,) = done.err.splitlines()
    assert "DISCORD_BOT_TOKEN is not set" in line


async def test_serve_with_nothing_configured_names_discord_too(
    tmp_path: Path, data_dir: Path
) -> None:
    done = await teammate("serve", env=cli_env(tmp_path, data_dir, None), cwd=tmp_path)
    assert done.code == 2
    assert "DISCORD_BOT_TOKEN" in done.err and "teammate discord invite" in done.err


async def test_doctor_checks_the_token_and_says_the_intent_mode(
    fake: FakeDiscord, tmp_path: Path, data_dir: Path
) -> None:
    done = await teammate("doctor", env=discord_env(tmp_path, data_dir, fake), cwd=tmp_path)
    lines = {line.split(":", 1)[0]: line for line in done.out.splitlines()}
    assert lines["ok    discord"].endswith(f"@teammate ({fake.bot_id}) via {fake.api_base}")
    # The fake's application does not have the Message Content intent switched on.
    assert lines["warn  discord intents"].startswith(
        "warn  discord intents: with the Message Content intent"
    )
    assert BOT_TOKEN not in done.out + done.err
    assert fake.requests_to("GET", "/users/@me")[0].headers["authorization"] == f"Bot {BOT_TOKEN}"

    without = discord_env(tmp_path, data_dir, fake, TEAMMATE_DISCORD__MESSAGE_CONTENT="false")
    done = await teammate("doctor", env=without, cwd=tmp_path)
    assert "ok    discord intents: runs without the Message Content intent" in done.out

    assert "ok    discord access: the application is private" in done.out

    wrong = discord_env(tmp_path, data_dir, fake, DISCORD_BOT_TOKEN="not-the-token")
    done = await teammate("doctor", env=wrong, cwd=tmp_path)
    assert done.code == 1
    assert "fail  discord: GET " in done.out and "DISCORD_BOT_TOKEN was refused" in done.out
    assert "not-the-token" not in done.out + done.err


async def test_doctor_warns_when_the_application_is_public(
    fake: FakeDiscord, tmp_path: Path, data_dir: Path
) -> None:
    fake.bot_public = True
    done = await teammate("doctor", env=discord_env(tmp_path, data_dir, fake), cwd=tmp_path)
    (line,) = [line for line in done.out.splitlines() if "discord access" in line]
    assert line.startswith("warn  discord access: the application is public")
    assert "anyone who adds it to a server of their own" in line and "allowed_guilds" in line
    guarded = discord_env(
        tmp_path, data_dir, fake, TEAMMATE_DISCORD__ALLOWED_GUILDS=f'["{fake.snowflake()}"]'
    )
    done = await teammate("doctor", env=guarded, cwd=tmp_path)
    (line,) = [line for line in done.out.splitlines() if "discord access" in line]
    assert line.startswith("warn  discord access: the application is public")
    assert "the allow-lists keep strangers out" in line


def readme_permissions() -> set[str]:
    """The permissions the README's Discord section lists, as discord.Permissions names."""
    text = " ".join(README.read_text().split())
    listed = text.split("exactly these permissions: ", 1)[1].split(".", 1)[0]
    return {name.strip().lower().replace(" ", "_") for name in listed.split(",")}


async def test_invite_prints_the_url_with_the_scopes_and_exactly_the_readme_permissions(
    fake: FakeDiscord, tmp_path: Path, data_dir: Path
) -> None:
    done = await teammate(
        "discord", "invite", env=discord_env(tmp_path, data_dir, fake), cwd=tmp_path
    )
    assert done.code == 0, done.err
    url = urllib.parse.urlsplit(done.out.strip())
    assert (url.scheme, url.netloc, url.path) == ("https", "discord.com", "/oauth2/authorize")
    query = urllib.parse.parse_qs(url.query)
    assert query["client_id"] == [fake.application_id]  # from the token
    assert query["scope"] == ["bot applications.commands"]
    granted = discord.Permissions(int(query["permissions"][0]))
    listed = readme_permissions()
    assert len(listed) == 8
    assert granted == discord.Permissions(**dict.fromkeys(listed, True)) == bot_permissions()
    assert fake.requests_to("GET", "/oauth2/applications/@me")
    given = await teammate(
        "discord",
        "invite",
        "--application-id",
        "42",
        env=cli_env(tmp_path, data_dir, None),
        cwd=tmp_path,
    )
    assert given.code == 0 and "client_id=42&" in given.out


async def read_until(process: asyncio.subprocess.Process, text: str) -> str:
    """stderr lines until one contains `text` (the process keeps running)."""
    assert process.stderr is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(process.stderr.readline(), TIMEOUT_S)).decode()
        if not line:
            raise AssertionError("the process ended:\n" + "".join(seen))
        seen.append(line)
        if text in line:
            return "".join(seen)


async def mention_on_discord(fake: FakeDiscord, channel: str, text: str) -> str:
    """A person mentions the bot in `channel`; the answer's thread (the message's id)."""
    payload = fake.message_payload(channel, text, mention_bot=True)
    await fake.dispatch("MESSAGE_CREATE", payload)
    thread = str(payload["id"])
    await fake.wait_for(
        lambda: (
            thread in fake.channels
            and any("scripted model" in m["content"] for m in fake.channel_messages(thread))
        ),
        TIMEOUT_S,
    )
    return thread


async def test_serve_with_only_discord_answers_a_mention_and_stops_gracefully(
    fake: FakeDiscord, tmp_path: Path, data_dir: Path
) -> None:
    general = fake.add_channel(next(iter(fake.guilds)), name="general")["id"]
    process = await start_serve(discord_env(tmp_path, data_dir, fake), tmp_path)
    try:
        started = await read_until(process, "Ctrl-C or SIGTERM stops.")
        assert "Discord: connected as @teammate, with the Message Content intent" in started
        assert "Slack" not in started
        await mention_on_discord(fake, general, "hello there")
    finally:
        err = await stop_serve(process)
    assert process.returncode == 0, err
    assert "stopped." in err
    assert fake.requests_to("PUT", r"/applications/\d+/commands")  # synced globally
    assert BOT_TOKEN not in err


async def test_serve_with_slack_and_discord_answers_on_both(
    fake: FakeDiscord, tmp_path: Path, data_dir: Path
) -> None:
    general = fake.add_channel(next(iter(fake.guilds)), name="general")["id"]
    async with FakeSlack() as slack:
        env = discord_env(tmp_path, data_dir, fake) | {
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_APP_TOKEN": slack.app_token,
            "SLACK_API_URL": slack.api_url,
        }
        process = await start_serve(env, tmp_path)
        try:
            started = await read_until(process, "Ctrl-C or SIGTERM stops.")
            assert "Slack: connected as @teammate (Socket Mode)" in started
            assert "Discord: connected as @teammate" in started
            await slack.wait_for(lambda s: s.socket_connected, TIMEOUT_S)
            ts = await mention(slack, "hello from Slack")
            await mention_on_discord(fake, general, "hello from Discord")
            await slack.wait_for(
                lambda s: "scripted model" in json.dumps(s.bot_replies("C1", ts)), TIMEOUT_S
            )
        finally:
            err = await stop_serve(process)
    assert process.returncode == 0, err
    # One process, one store: both conversations are in the same database.
    with sqlite3.connect(data_dir / "teammate.db") as db:
        keys = sorted(str(row[0]) for row in db.execute("SELECT key FROM conversations"))
    assert [key.split(":", 1)[0] for key in keys] == ["discord", "slack"]
