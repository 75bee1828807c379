"""The manifest holds exactly what the adapter uses; doctor checks the same scopes."""

from __future__ import annotations

import json
from pathlib import Path

from bots.platforms.slack.manifest import (
    BOT_EVENTS,
    BOT_SCOPES,
    manifest,
    manifest_json,
    missing_scopes,
)
from tests.fakes.slack_server import DEFAULT_SCOPES

SLACK = Path(__file__).resolve().parents[4] / "bots" / "platforms" / "slack"


def test_socket_mode_manifest_has_scopes_events_command_and_interactivity() -> None:
    app = json.loads(manifest_json())
    settings = app["settings"]
    assert settings["socket_mode_enabled"] is True
    assert settings["interactivity"] == {"is_enabled": True}
    assert "request_url" not in settings["event_subscriptions"]
    assert settings["event_subscriptions"]["bot_events"] == list(BOT_EVENTS)
    assert app["oauth_config"]["scopes"]["bot"] == list(BOT_SCOPES)
    (command,) = app["features"]["slash_commands"]
    assert command["command"] == "/teammate"
    assert "url" not in command
    assert app["features"]["app_home"]["messages_tab_enabled"] is True  # DMs
    assert "assistant_view" in app["features"]


def test_http_mode_manifest_points_every_request_at_the_url() -> None:
    url = "https://bot.example.com/slack/events"
    app = manifest(command="/tm", request_url=url)
    assert app["settings"]["socket_mode_enabled"] is False
    assert app["settings"]["event_subscriptions"]["request_url"] == url
    assert app["settings"]["interactivity"]["request_url"] == url
    assert app["features"]["slash_commands"][0] == {
        "command": "/tm",
        "description": "Teammate: help, usage, stop, reset, config",
        "usage_hint": "help | usage | stop | reset | config",
        "should_escape": False,
        "url": url,
    }


def test_events_cover_what_the_listeners_subscribe_to() -> None:
    listeners = (SLACK / "listeners.py").read_text()
    for event in ("app_mention", "message"):
        assert f'bolt.event("{event}")' in listeners
    assert "bolt.assistant(" in listeners  # assistant_thread_* events
    assert {"assistant_thread_started", "assistant_thread_context_changed"} <= set(BOT_EVENTS)
    assert "agent_session_stopped" in BOT_EVENTS  # or Slack's stop button is not offered


def test_every_web_api_family_the_adapter_calls_has_its_scope() -> None:
    code = "".join(path.read_text() for path in SLACK.glob("*.py"))
    needs = {
        "chat_post": "chat:write",
        "chat_update": "chat:write",
        "reactions_add": "reactions:write",
        "users_info": "users:read",
        "conversations_replies": "channels:history",
        "files_upload_v2": "files:write",
        "assistant_threads_set": "assistant:write",
    }
    for call, scope in needs.items():
        if call in code:
            assert scope in BOT_SCOPES, (call, scope)


def test_missing_scopes_are_named_in_the_manifests_order() -> None:
    assert missing_scopes(DEFAULT_SCOPES) == []
    assert missing_scopes("chat:write, commands") == [
        scope for scope in BOT_SCOPES if scope not in ("chat:write", "commands")
    ]
    assert missing_scopes(None) == list(BOT_SCOPES)


def test_with_the_console_s_address_the_manifest_allows_sign_in_with_slack() -> None:
    plain = manifest()
    assert "user" not in plain["oauth_config"]["scopes"]
    assert "redirect_urls" not in plain["oauth_config"]
    app = manifest(console_url="https://teammate.example.com/")
    assert app["oauth_config"]["scopes"]["user"] == ["openid", "profile"]
    assert app["oauth_config"]["redirect_urls"] == [
        "https://teammate.example.com/auth/slack/callback"
    ]
