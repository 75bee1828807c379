"""The console as people start it: `teammate serve` serving it on one HTTP server with Slack
HTTP mode's `/slack/events`, `teammate console` alone over an existing database, `teammate
console link` printing a one-time sign-in URL, and the refusals (no database, someone who may
not get in, a non-loopback address with no sign-in). Real commands in subprocesses."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from storage.sqlite import SqliteStore
from tests.bots.test_cli import REPO, TIMEOUT_S, cli_env, teammate
from tests.fakes.slack_server import FakeSlack

URL = re.compile(r"(http://127\.0\.0\.1:\d+)/")


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def start(env: dict[str, str], cwd: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        *args,
        cwd=cwd,
        env=env | {"PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def line_matching(process: asyncio.subprocess.Process, pattern: str) -> str:
    assert process.stderr is not None
    seen: list[str] = []

    async def read() -> str:
        while True:
            raw = await process.stderr.readline()  # type: ignore[union-attr]
            if not raw:
                raise AssertionError("exited before saying: " + pattern + "\n" + "".join(seen))
            line = raw.decode()
            seen.append(line)
            if re.search(pattern, line):
                return line

    return await asyncio.wait_for(read(), TIMEOUT_S)


async def stop(process: asyncio.subprocess.Process) -> int:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    return process.returncode or 0


async def test_serve_puts_the_console_and_slack_events_on_one_server(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    env = cli_env(
        tmp_path,
        tmp_path / "data",
        None,
        TEAMMATE_MODEL="scripted",
        SLACK_BOT_TOKEN=fake_slack.bot_token,
        SLACK_SIGNING_SECRET="signing-secret-for-tests",
        SLACK_API_URL=fake_slack.api_url,
    )
    process = await start(env, tmp_path, "serve", "--http", "--host", "127.0.0.1", "--port", "0")
    try:
        line = await line_matching(process, r"Console: http://")
        found = URL.search(line)
        assert found is not None and "/slack/events" in line
        base = found.group(1)
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/healthz") as response:
                assert response.status == 200
            async with http.get(base + "/signin") as response:
                assert response.status == 200 and "Sign in" in await response.text()
            async with http.post(base + "/slack/events", data=b"{}") as response:
                assert response.status == 401  # Slack's gate: unsigned, refused
    finally:
        assert await stop(process) == 0


async def test_console_alone_serves_an_existing_database_and_a_link_signs_in_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    async with SqliteStore.open(data / "teammate.db"):
        pass
    env = cli_env(
        tmp_path,
        data,
        None,
        TEAMMATE_CONSOLE__PORT="0",
        TEAMMATE_SLACK__ADMINS='["UADMIN"]',
    )
    process = await start(env, tmp_path, "console")
    try:
        found = URL.search(await line_matching(process, r"console at http://"))
        assert found is not None
        base = found.group(1)
        link = await teammate(
            "console",
            "link",
            "--user",
            "slack:UADMIN",
            env=env | {"TEAMMATE_CONSOLE__PUBLIC_URL": base},
            cwd=tmp_path,
        )
        assert link.code == 0, link.err
        url = link.out.strip()
        assert url.startswith(base + "/auth/link/") and len(link.out.splitlines()) == 1
        token = url.rsplit("/", 1)[1]
        # (unsafe: keep cookies of an IP address, as a browser does)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(url) as response:
                assert response.status == 200  # a button: a preview does not use it up
            async with http.post(
                base + "/auth/link", data={"token": token}, allow_redirects=False
            ) as response:
                assert response.status == 303
                assert "teammate_console" in response.cookies
            async with http.get(base + "/audit") as response:
                page = await response.text()
                assert "console.sign_in" in page and "console.link" in page
        async with (
            aiohttp.ClientSession() as again,
            again.post(
                base + "/auth/link", data={"token": token}, allow_redirects=False
            ) as response,
        ):
            assert response.status == 403
            assert "used already" in await response.text()
    finally:
        assert await stop(process) == 0


async def test_the_console_refuses_what_it_cannot_do_safely(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = cli_env(tmp_path, data, None, TEAMMATE_SLACK__ADMINS='["UADMIN"]')
    missing = await teammate("console", env=env, cwd=tmp_path)
    assert missing.code == 2 and "no database at" in missing.err
    data.mkdir(exist_ok=True)
    async with SqliteStore.open(data / "teammate.db"):
        pass
    nobody = await teammate("console", "link", "--user", "slack:UNOBODY", env=env, cwd=tmp_path)
    assert nobody.code == 2 and "may not use the console" in nobody.err
    assert nobody.out == ""
    open_host = await teammate(
        "console", env=env | {"TEAMMATE_CONSOLE__HOST": "0.0.0.0"}, cwd=tmp_path
    )
    assert open_host.code == 2
    assert "would open the console to other machines" in open_host.err
    assert "SLACK_CLIENT_ID" in open_host.err
