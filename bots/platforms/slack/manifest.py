"""The Slack app manifest: exactly what the adapter uses, ready to paste at api.slack.com/apps.

Owns: the one list of OAuth scopes the bot token needs (`BOT_SCOPES`, also what
`teammate doctor` checks), each with the Web API method or event that needs it, the bot events
subscribed, the slash command, interactivity (the Stop and feedback buttons) and the AI-app
assistant view. Socket Mode is on unless an HTTP request URL is given. With the console's
address, Sign in with Slack too: its redirect URL and the `openid`/`profile` user scopes.

Slack's manifest format: https://api.slack.com/reference/manifests (JSON is accepted as is,
like YAML).
"""

from __future__ import annotations

import json
from typing import Any

# Every scope with why it is needed; a scope no code uses does not belong here.
BOT_SCOPES: dict[str, str] = {
    "app_mentions:read": "the app_mention event (a mention in a channel)",
    "channels:history": "message events and conversations.replies in public channels",
    "groups:history": "message events and conversations.replies in private channels",
    "im:history": "message events in direct messages",
    "mpim:history": "message events in group direct messages",
    "chat:write": "chat.postMessage/update/delete/postEphemeral and chat.*Stream",
    "reactions:write": "the 👀 / ✅ / ❌ reactions on the message being answered",
    "users:read": "users.info, for display names",
    "files:read": "downloading files shared with a message",
    "files:write": "uploading files the assistant wrote (files.uploadV2)",
    "commands": "the slash command",
    "assistant:write": "assistant threads: status line, suggested prompts, title",
}

BOT_EVENTS: tuple[str, ...] = (
    "app_mention",
    "message.channels",
    "message.groups",
    "message.im",
    "message.mpim",
    "assistant_thread_started",
    "assistant_thread_context_changed",
    "agent_session_stopped",  # Slack's own stop button on an agent session (listeners.py)
)

# Sign in with Slack (OpenID Connect), for the console (bots.console.signin).
SIGN_IN_USER_SCOPES: tuple[str, ...] = ("openid", "profile")
SIGN_IN_CALLBACK = "/auth/slack/callback"

DEFAULT_NAME = "Teammate"
DESCRIPTION = "A shared AI assistant: mention it in a channel and it answers in the thread."
SUGGESTED_PROMPTS = (
    ("Summarise this channel's discussion", "Summarise what this channel discussed today."),
    ("Review a diff", "I'll paste a diff: review it for bugs and unclear names."),
)


def manifest(
    *,
    command: str = "/teammate",
    name: str = DEFAULT_NAME,
    request_url: str | None = None,
    console_url: str | None = None,
) -> dict[str, Any]:
    """The app manifest. `request_url` (e.g. `https://bot.example.com/slack/events`) is for
    HTTP mode; without it Socket Mode is on and no public URL is needed. `console_url` (e.g.
    `https://teammate.example.com`): the console's Sign in with Slack."""
    slash: dict[str, Any] = {
        "command": command,
        "description": "Teammate: help, usage, stop, reset, config",
        "usage_hint": "help | usage | stop | reset | config",
        "should_escape": False,
    }
    interactivity: dict[str, Any] = {"is_enabled": True}
    events: dict[str, Any] = {"bot_events": list(BOT_EVENTS)}
    if request_url is not None:
        slash["url"] = request_url
        interactivity["request_url"] = request_url
        events["request_url"] = request_url
    return {
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": name,
            "description": DESCRIPTION,
            "background_color": "#2c2d30",
        },
        "features": {
            "app_home": {
                "home_tab_enabled": False,
                "messages_tab_enabled": True,  # direct messages
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": name.lower(), "always_online": True},
            "assistant_view": {
                "assistant_description": DESCRIPTION,
                "suggested_prompts": [
                    {"title": title, "message": message} for title, message in SUGGESTED_PROMPTS
                ],
            },
            "slash_commands": [slash],
        },
        "oauth_config": _oauth_config(console_url),
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": request_url is None,
            "token_rotation_enabled": False,
        },
    }


def _oauth_config(console_url: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"scopes": {"bot": list(BOT_SCOPES)}}
    if console_url:
        config["scopes"]["user"] = list(SIGN_IN_USER_SCOPES)
        config["redirect_urls"] = [console_url.rstrip("/") + SIGN_IN_CALLBACK]
    return config


def manifest_json(**options: Any) -> str:
    return json.dumps(manifest(**options), indent=2, ensure_ascii=False) + "\n"


def missing_scopes(granted_header: str | None) -> list[str]:
    """The scopes `BOT_SCOPES` needs that the token lacks, from auth.test's `x-oauth-scopes`
    header (comma separated); all of them when the header is absent."""
    granted = {scope.strip() for scope in (granted_header or "").split(",") if scope.strip()}
    return [scope for scope in BOT_SCOPES if scope not in granted]
