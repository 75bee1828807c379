"""A channel's run-time configuration, as any platform's admin command changes it, and the
channel's day of usage as the usage commands show it.

Owns: checking a change to a channel's extra system prompt, model or tools (stored tools can
only narrow what the configuration file allows: a chat command must never turn on `bash`;
a stored list names MCP servers the way the file's `mcp_servers` does, a server for all its
tools, or one of its tools as `teammate mcp list` shows it, `server__tool`; `keeps_tool`),
storing it through the store's contract (`set_channel_config`, one read-modify-write at a time
per process), and describing the result with where each value comes from. The runner layers
what is stored over the file for every new run (`bots.settings.ChannelConfig`).

Texts are plain sentences without platform markup; each adapter frames them.

Must not: know a platform (no `bots.platforms.slack`, no `bots.platforms.discord`), or write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bots.features.approvals_policy import describe_approvals, parse_approvals
from bots.settings import ChannelConfig, Settings
from core.models.catalog import ANTHROPIC_MODELS, LOCAL_MODELS, model_status
from core.tools import AnyTool
from storage.base import ConversationStore, UsageSummary

log = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 4000  # ChannelConfig.system_prompt's bound
SHOWN_PROMPT_CHARS = 600
# One MCP tool as the model sees it (tools.mcp_tools.tool_name): `server__tool`.
_MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(slots=True, frozen=True)
class ConfigChange:
    """What an admin asked for; None leaves a field alone. `prompt="clear"`,
    `model="default"`, `tools="default"` / `"none"` are the words that undo or empty."""

    prompt: str | None = None
    model: str | None = None
    tools: str | None = None
    reset: bool = False
    timezone: str | None = None  # an IANA name, or "default"
    # Tool names or globs, with `approvers=…` and `timeout=<s>`; "off"; or "default".
    approvals: str | None = None

    @property
    def empty(self) -> bool:
        return (
            not self.reset
            and self.prompt is None
            and self.model is None
            and self.tools is None
            and self.timezone is None
            and self.approvals is None
        )


@dataclass(slots=True, frozen=True)
class ConfigView:
    """A channel's effective configuration, each value with its source."""

    model: str
    prompt: str
    tools: str
    timezone: str = ""
    approvals: str = ""


def allowed_tools(settings: Settings, channel_key: str) -> list[str]:
    """The tools the configuration file gives the channel: the most a command may keep. Its
    MCP servers are named too (a stored server name keeps all that server's tools)."""
    tools = settings.tools_for(channel_key)
    return [
        *tools.enabled,
        *(["bash"] if tools.bash_enabled else []),
        *mcp_servers(settings, channel_key),
    ]


def mcp_servers(settings: Settings, channel_key: str) -> list[str]:
    """The configured MCP servers the file gives the channel (its `mcp_servers`; all if unset)."""
    chosen = settings.tools_for(channel_key).mcp_servers
    configured = settings.mcp.servers
    return list(configured) if chosen is None else [n for n in chosen if n in configured]


def keeps_tool(stored: Collection[str], tool: AnyTool) -> bool:
    """Whether a stored tool list keeps `tool`: it names the tool, or the MCP server it is of."""
    return tool.name in stored or _mcp_server_of(tool) in stored


def _allowed(name: str, allowed: Collection[str], servers: Collection[str]) -> bool:
    if name in allowed:
        return True
    if not _MCP_TOOL_NAME.fullmatch(name):
        return False
    return any(name.startswith(f"{server}__") and name != f"{server}__" for server in servers)


def apply_change(
    settings: Settings, channel_key: str, stored: ChannelConfig, change: ConfigChange
) -> tuple[str, ChannelConfig]:
    """The new configuration, or a problem text (non-empty) and the old one unchanged."""
    changed = ChannelConfig() if change.reset else stored
    for field, value in (("prompt", change.prompt), ("model", change.model)):
        if value is None:
            continue
        value = value.strip()
        if field == "prompt":
            problem, changed = _with_prompt(changed, value)
        else:
            problem, changed = _with_model(settings, changed, value)
        if problem:
            return problem, stored
    if change.tools is not None:
        problem, changed = _with_tools(settings, channel_key, changed, change.tools.strip())
        if problem:
            return problem, stored
    if change.timezone is not None:
        problem, changed = _with_timezone(changed, change.timezone.strip())
        if problem:
            return problem, stored
    if change.approvals is not None:
        problem, policy = parse_approvals(change.approvals.strip())
        changed = changed.model_copy(update={"approvals": policy})
        if problem:
            return problem, stored
    return "", changed


def channel_timezone(settings: Settings, channel_key: str, stored: ChannelConfig) -> str:
    """The channel's time zone for scheduled work: set here, else the file's."""
    if stored.timezone is not None and _known_zone(stored.timezone):
        return stored.timezone
    return settings.timezone_for(channel_key)


def describe(settings: Settings, channel_key: str, stored: ChannelConfig) -> ConfigView:
    file_channel = settings.channel(channel_key)
    if stored.model is not None:
        model = f"{stored.model} (set here)"
    else:
        model = f"{settings.model_for(channel_key)} (configuration file)"
    if stored.system_prompt is not None:
        prompt = f"{_quote(stored.system_prompt)} (set here)"
    elif file_channel.system_prompt.strip():
        prompt = f"{_quote(file_channel.system_prompt)} (configuration file)"
    else:
        prompt = "none"
    allowed = allowed_tools(settings, channel_key)
    if stored.tools is not None:
        servers = mcp_servers(settings, channel_key)
        kept = [name for name in stored.tools if _allowed(name, allowed, servers)]
        tools = f"{', '.join(kept) or 'none'} (set here)"
    else:
        tools = f"{', '.join(allowed) or 'none'} (configuration file)"
    if stored.timezone is not None:
        timezone = f"{channel_timezone(settings, channel_key, stored)} (set here)"
    else:
        timezone = f"{settings.timezone_for(channel_key)} (configuration file)"
    if stored.approvals is not None:
        approvals = f"{describe_approvals(stored.approvals)} (set here)"
    else:
        file_policy = settings.approvals_for(channel_key)
        approvals = f"{describe_approvals(file_policy)} (configuration file)"
    return ConfigView(
        model=model, prompt=prompt, tools=tools, timezone=timezone, approvals=approvals
    )


class ChannelConfigs:
    """Reads and changes stored channel configurations, one change at a time."""

    def __init__(self, store: ConversationStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._lock = asyncio.Lock()  # one read-modify-write at a time

    async def current(self, channel_key: str) -> ChannelConfig:
        return ChannelConfig.from_stored(await self.store.get_channel_config(channel_key))

    async def change(
        self, channel_key: str, change: ConfigChange, *, by: str
    ) -> tuple[str, ChannelConfig]:
        """Apply and store `change`: ("", new configuration), or (problem, the stored one)."""
        async with self._lock:
            stored = await self.current(channel_key)
            problem, changed = apply_change(self.settings, channel_key, stored, change)
            if problem:
                return problem, stored
            await self.store.set_channel_config(channel_key, changed.to_stored(), by=by)
        log.info("%s changed the configuration of %s", by, channel_key)
        return "", changed


def usage_today_text(summary: UsageSummary) -> str:
    """ "(since midnight UTC): 3 answers · 1,200 tokens read, 300 written · $0.0123 · 👍 1 👎 0"."""
    usage = summary.usage
    answers = "answer" if summary.runs == 1 else "answers"
    cost = f"${usage.cost:.2f}" if usage.cost >= 0.1 or usage.cost == 0 else f"${usage.cost:.4f}"
    cached = usage.cache_read + usage.cache_write
    extra = f" ({cached:,} of them cached)" if cached else ""
    return (
        f"(since midnight UTC): {summary.runs} {answers} · "
        f"{usage.input + cached:,} tokens read{extra}, {usage.output:,} written · {cost} · "
        f"👍 {summary.votes_up} 👎 {summary.votes_down}"
    )


def _with_prompt(stored: ChannelConfig, value: str) -> tuple[str, ChannelConfig]:
    if not value:
        return "Give the instructions (or `clear`).", stored
    if value.lower() == "clear":
        return "", stored.model_copy(update={"system_prompt": None})
    if len(value) > MAX_PROMPT_CHARS:
        return f"That's {len(value):,} characters; the limit is {MAX_PROMPT_CHARS:,}.", stored
    return "", stored.model_copy(update={"system_prompt": value})


def _with_model(settings: Settings, stored: ChannelConfig, value: str) -> tuple[str, ChannelConfig]:
    if not value:
        return "Name the model (or `default`).", stored
    if value.lower() == "default":
        return "", stored.model_copy(update={"model": None})
    status = None if value in LOCAL_MODELS else model_status(value)
    if status is not None and status.kind == "unknown":
        # Only ids the catalog prices exactly: a chat command must not pick an estimated cost.
        current = [m for m, spec in ANTHROPIC_MODELS.items() if not spec.deprecated]
        choices = ", ".join(f"`{model_id}`" for model_id in current)
        return f"I don't know the model `{_short(value, 80)}`. Known: {choices}.", stored
    if status is not None and status.kind == "retired":
        return f"`{_short(value, 80)}` was {status.advice}", stored
    key = settings.anthropic_api_key
    if value not in LOCAL_MODELS and (key is None or not key.get_secret_value()):
        return f"`{value}` needs ANTHROPIC_API_KEY, which is not set.", stored
    return "", stored.model_copy(update={"model": value})


def _with_tools(
    settings: Settings, channel_key: str, stored: ChannelConfig, value: str
) -> tuple[str, ChannelConfig]:
    allowed = allowed_tools(settings, channel_key)
    if not value:
        return (
            f"List the tools, e.g. `read,grep` (allowed here: {', '.join(allowed) or 'none'}), "
            "or `none`, or `default`.",
            stored,
        )
    if value.lower() == "default":
        return "", stored.model_copy(update={"tools": None})
    if value.lower() == "none":
        return "", stored.model_copy(update={"tools": ()})
    names = [name for name in value.replace(",", " ").split() if name]
    servers = mcp_servers(settings, channel_key)
    refused = [name for name in names if not _allowed(name, allowed, servers)]
    if refused:
        return (
            f"Not allowed here: {', '.join(_short(n, 40) for n in refused[:10])}. The "
            f"configuration file allows: {', '.join(allowed) or 'none'}.",
            stored,
        )
    return "", stored.model_copy(update={"tools": tuple(dict.fromkeys(names))})


def _with_timezone(stored: ChannelConfig, value: str) -> tuple[str, ChannelConfig]:
    if not value:
        return "Name the time zone, e.g. `Europe/Berlin` (or `default`).", stored
    if value.lower() == "default":
        return "", stored.model_copy(update={"timezone": None})
    if len(value) > 64 or not _known_zone(value):
        return (
            f"I don't know the time zone `{_short(value, 64)}`; use an IANA name such as "
            "`Europe/Berlin`, `America/New_York` or `UTC`.",
            stored,
        )
    return "", stored.model_copy(update={"timezone": value})


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _quote(text: str) -> str:
    return f"“{_short(' '.join(text.split()), SHOWN_PROMPT_CHARS)}”"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _mcp_server_of(tool: AnyTool) -> str | None:
    """The MCP server a tool comes from (None for ours). Without importing the MCP SDK: an
    MCP tool exists only once `tools.mcp_tools` was imported, and a process with no MCP
    server configured never imports it."""
    module = sys.modules.get("tools.mcp_tools")
    if module is not None and isinstance(tool, module.McpTool):
        return str(tool.server.name)
    return None
