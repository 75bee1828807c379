"""The console's rules without a browser: signed cookies refuse anything altered, expired or
hostile; `next` never leaves the console; roles come from the same lists as chat; a console
open to the network needs a sign-in provider; a taken port does not stop `serve`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from bots.console.process import ProcessHttp
from bots.console.roles import discord_role_guild, role_for
from bots.console.sessions import Sessions, Signer
from bots.console.settings import ConsoleSettings, is_loopback, require_safe_host
from bots.console.signin import safe_next
from bots.platform import ServeOptions
from bots.settings import DiscordSettings, Settings, SettingsError, SlackSettings
from storage.sqlite import SqliteStore


def test_a_signed_cookie_refuses_anything_altered_expired_or_hostile() -> None:
    signer = Signer("secret", "console-session")
    cookie = signer.sign({"who": "slack:U1"}, expires_at=200.0)
    assert signer.read(cookie, now=100.0) == {"who": "slack:U1", "exp": 200.0}
    assert signer.read(cookie, now=200.0) is None  # expired
    body, mac = cookie.split(".")
    assert signer.read(body + "." + mac[:-1] + ("A" if mac[-1] != "A" else "B"), now=1) is None
    assert signer.read(body[:-2] + "." + mac, now=1) is None
    assert Signer("other secret", "console-session").read(cookie, now=1) is None
    assert Signer("secret", "console-signin").read(cookie, now=1) is None  # another purpose
    for hostile in ("", ".", "a.b.c", "é.é", "x" * 5000, "\x00.\x00", body + ".é"):
        assert signer.read(hostile, now=1) is None


def test_a_session_s_csrf_token_is_its_own() -> None:
    sessions = Sessions("secret", lifetime_s=60)
    first, _ = sessions.new("slack:U1", "Ada", "admin", now=0)
    second, _ = sessions.new("slack:U1", "Ada", "admin", now=0)
    assert first.session_id != second.session_id  # every sign-in a new id
    assert sessions.csrf_ok(first, sessions.csrf_token(first))
    assert not sessions.csrf_ok(first, sessions.csrf_token(second))
    assert not sessions.csrf_ok(first, None)
    assert not sessions.csrf_ok(first, "ünïcode")


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ("/health", "/health"),
        ("/channels/slack:T1:C1?x=1", "/channels/slack:T1:C1?x=1"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("https://evil.example", "/"),
        ("health", "/"),
        (None, "/"),
    ],
)
def test_next_never_leaves_the_console(asked: str | None, kept: str) -> None:
    assert safe_next(asked) == kept


def test_roles_come_from_the_chat_admins_and_the_console_viewers() -> None:
    settings = Settings(
        slack=SlackSettings(admins=["UADMIN"]),
        discord=DiscordSettings(admin_users=["11"], admin_roles=["99"], dev_guild_id="5"),
        console=ConsoleSettings(viewers=["slack:UVIEW", "discord:22"]),
    )
    assert role_for(settings, "slack:UADMIN") == "admin"
    assert role_for(settings, "discord:11") == "admin"
    assert role_for(settings, "discord:33", discord_roles=["1", "99"]) == "admin"
    assert role_for(settings, "slack:UVIEW") == "viewer"
    assert role_for(settings, "discord:22") == "viewer"
    assert role_for(settings, "slack:UNOBODY") is None
    assert role_for(settings, "discord:UADMIN") is None  # a Slack admin's id on Discord
    assert role_for(settings, "slack:") is None
    assert discord_role_guild(settings) == "5"
    with pytest.raises(ValidationError):
        ConsoleSettings(viewers=["U0123"])  # not platform-qualified


def test_a_console_open_to_the_network_needs_a_sign_in_provider() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    assert require_safe_host("127.0.0.1", sign_in_configured=False) is None
    assert require_safe_host("0.0.0.0", sign_in_configured=True) is None
    problem = require_safe_host("0.0.0.0", sign_in_configured=False)
    assert problem is not None and "SLACK_CLIENT_ID" in problem
    with pytest.raises(SettingsError):
        ProcessHttp.for_serve(Settings(console=ConsoleSettings(host="0.0.0.0")), ServeOptions())
    allowed = Settings(
        console=ConsoleSettings(host="0.0.0.0"),
        slack_client_id="1.2",
        slack_client_secret=SecretStr("s"),
    )
    assert ProcessHttp.for_serve(allowed, ServeOptions()) is not None
    assert (
        ProcessHttp.for_serve(Settings(console=ConsoleSettings(enabled=False)), ServeOptions())
        is None
    )


async def test_a_taken_console_port_is_reported_and_serve_goes_on(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        settings = Settings(data_dir=tmp_path, console=ConsoleSettings(port=port))
        http = ProcessHttp.for_serve(settings, ServeOptions())
        assert http is not None
        async with SqliteStore.open(tmp_path / "teammate.db") as store:
            [line] = await http.start(store, runner=None)  # type: ignore[arg-type]
            assert "not served" in line and str(port) in line
            await http.close()
    finally:
        taken.close()
