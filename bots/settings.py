"""Configuration: environment, an optional `.env`, an optional TOML file.

Owns: `Settings` (built once in the entry point and passed down; never a module global),
per-channel settings, budgets, and turning a validation failure into one clear line that names
the setting. Precedence: environment, then `.env`, then the TOML file named by
`TEAMMATE_CONFIG` (default `teammate.toml` if it exists), then defaults.

Secrets are `SecretStr`: they print as `**********` in reprs, logs and errors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dotenv import dotenv_values
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings import SettingsError as EnvSourceError

from bots.config_file import ConfigFileError, read_config
from bots.console.settings import ConsoleSettings
from bots.settings_check import (
    describe,
    named_by_configuration,
    unknown_in_file,
    unknown_variables,
)
from core.models.catalog import DEFAULT_MODEL, RetiredModelError, retired_model
from storage.dsn import dsn_secrets
from tools.mcp_config import McpSettings
from tools.toolset import ToolsConfig

# Bounds on what a configuration file may say (a prompt is sent with every model call).
MAX_PROMPT_CHARS = 100_000
MAX_MODEL_ID_CHARS = 200


class SettingsError(Exception):
    """A missing or invalid setting, as one line that names it."""


def _known_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)") from None
    return name


TimeZoneName = Annotated[str, AfterValidator(_known_zone)]


def _not_retired(model_id: str) -> str:
    # The API refuses a retired id on every request: better to refuse to start, naming it.
    retired = retired_model(model_id)
    if retired is not None:
        raise ValueError(str(RetiredModelError(model_id, retired)))
    return model_id


ModelId = Annotated[str, AfterValidator(_not_retired)]


class ChannelSettings(BaseModel):
    """Settings for one channel (by channel key, e.g. `slack:T1:C1`, `terminal`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system_prompt: str = Field(default="", max_length=MAX_PROMPT_CHARS)  # added to the base
    model: ModelId | None = Field(default=None, max_length=MAX_MODEL_ID_CHARS)
    tools: ToolsConfig | None = None  # replaces the default toolset when given
    # Replies in a thread Teammate is part of continue it without a new mention (None: the
    # platform's default, e.g. `[slack] follow_ups`).
    follow_ups: bool | None = None
    timezone: TimeZoneName | None = None  # for scheduled work (None: `[schedules] timezone`)


_NO_CHANNEL = ChannelSettings()

_SLASH_COMMAND = r"^/[a-z0-9_-]{1,31}$"


class SlackSettings(BaseModel):
    """`[slack]`: how Teammate behaves in Slack (its tokens are the SLACK_* variables)."""

    model_config = ConfigDict(extra="forbid")

    # User ids (U…) who may change a channel's configuration with `/teammate config`.
    admins: list[str] = Field(default_factory=list)
    dms_enabled: bool = True  # answer direct messages (off: a short note instead)
    follow_ups: bool = True  # thread replies without a mention, where a channel doesn't say
    command: str = Field(default="/teammate", pattern=_SLASH_COMMAND)  # the slash command
    usage_footer: bool = False  # tokens and cost under each answer
    # Workspaces of other organisations (Slack Connect) whose people may use Teammate: their
    # team ids, or "*" for any. Empty: people of other organisations are refused with a note
    # (they would drive the team's tools on the team's budget).
    external_teams: list[str] = Field(default_factory=list)


class ChannelConfig(BaseModel):
    """What a channel admin set at run time (`/teammate config`, kept in the store), layered
    over the configuration file's `channels.*`: a field that is None keeps the file's value.
    Stored tools can only narrow the channel's toolset, never grant a tool the file does not
    (a chat command must not turn on `bash`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    system_prompt: str | None = Field(default=None, max_length=4000)
    model: str | None = Field(default=None, max_length=200)
    tools: tuple[str, ...] | None = None
    # For scheduled work; checked when set (a zone unknown later falls back to the file's).
    timezone: str | None = Field(default=None, max_length=64)

    @classmethod
    def from_stored(cls, stored: dict[str, Any] | None) -> ChannelConfig:
        """The stored object, or nothing set if it is missing or unreadable (a bad row must
        not stop a channel from being answered)."""
        if not stored:
            return _NO_CONFIG
        try:
            return cls.model_validate(stored)
        except ValidationError:
            return _NO_CONFIG

    def to_stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


_NO_CONFIG = ChannelConfig()


class BudgetSettings(BaseModel):
    """Daily spend limits in USD (UTC days); None means no limit."""

    model_config = ConfigDict(extra="forbid")

    conversation_usd_per_day: float | None = Field(default=None, ge=0)
    channel_usd_per_day: float | None = Field(default=None, ge=0)
    user_usd_per_day: float | None = Field(default=None, ge=0)


class CompactionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Compact when the next request would leave fewer than this many tokens of the window.
    reserve_tokens: int = Field(default=16_384, ge=0)
    # Keep about this many tokens of the most recent turns verbatim.
    keep_recent_tokens: int = Field(default=20_000, ge=0)


class MemorySettings(BaseModel):
    """A channel's memory: notes shown to the model with every run in the channel."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # the remember/forget tools and `/teammate memory`
    max_notes: int = Field(default=30, ge=1, le=500)
    max_note_chars: int = Field(default=300, ge=10, le=2000)
    max_total_chars: int = Field(default=4000, ge=10, le=50_000)


class ScheduleSettings(BaseModel):
    """Scheduled work: prompts run in a channel at set times."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # the schedule tool and the scheduler
    timezone: TimeZoneName = "UTC"  # a channel's time zone unless `[channels."…"] timezone` says
    max_per_channel: int = Field(default=10, ge=1, le=100)
    min_interval_minutes: int = Field(default=5, ge=1)  # no cron firing more often
    poll_s: float = Field(default=20.0, gt=0, le=300)  # how often due work is looked for


def _snowflake_text(value: object) -> object:
    # TOML and JSON lists hold ids as numbers; Discord's payloads as strings. Keep strings.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


Snowflake = Annotated[
    str, BeforeValidator(_snowflake_text), StringConstraints(pattern=r"^[0-9]{1,20}$")
]


class DiscordSettings(BaseModel):
    """The Discord adapter (`[discord]`, or `TEAMMATE_DISCORD__...`). Ids are snowflakes,
    numbers or strings. Empty allow-lists allow everyone and everywhere."""

    model_config = ConfigDict(extra="forbid")

    # Sync slash commands to this guild only (instant, for development); None: globally.
    dev_guild_id: Snowflake | None = None
    # The privileged Message Content intent. Off, the bot still answers mentions, replies to
    # it and DMs, but not plain messages in its threads.
    message_content: bool = True
    allow_dms: bool = True
    allowed_guilds: list[Snowflake] = Field(default_factory=list)
    allowed_channels: list[Snowflake] = Field(default_factory=list)  # a thread: its parent
    allowed_roles: list[Snowflake] = Field(default_factory=list)
    allowed_users: list[Snowflake] = Field(default_factory=list)
    # Who may use `/teammate config`: these users, or anyone with one of these roles.
    admin_users: list[Snowflake] = Field(default_factory=list)
    admin_roles: list[Snowflake] = Field(default_factory=list)
    # Gateway shards (docs/architecture.md, "Several instances"): unset, discord.py asks
    # Discord how many shards to open and runs them all in this process. Several instances
    # on one database: the same `shard_count` everywhere and each instance its own
    # `shard_ids` (e.g. 3 instances, shard_count = 3: [0], [1], [2]).
    shard_count: int | None = Field(default=None, ge=1)
    shard_ids: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _shards_fit(self) -> DiscordSettings:
        if self.shard_ids and self.shard_count is None:
            raise ValueError("shard_ids needs shard_count (the total over every instance)")
        count = self.shard_count or 0
        outside = [n for n in self.shard_ids if not 0 <= n < count]
        if outside:
            raise ValueError(f"shard_ids {outside} are not in 0..{count - 1} (shard_count)")
        if len(set(self.shard_ids)) != len(self.shard_ids):
            raise ValueError("shard_ids lists a shard twice")
        return self


_ENV_ALIASES: dict[str, str] = {
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "anthropic_base_url": "ANTHROPIC_BASE_URL",
    "slack_bot_token": "SLACK_BOT_TOKEN",
    "slack_app_token": "SLACK_APP_TOKEN",
    "slack_signing_secret": "SLACK_SIGNING_SECRET",
    "slack_api_url": "SLACK_API_URL",
    "discord_bot_token": "DISCORD_BOT_TOKEN",
    "discord_api_url": "DISCORD_API_URL",
    "discord_gateway_url": "DISCORD_GATEWAY_URL",
    "slack_client_id": "SLACK_CLIENT_ID",  # the console's sign-in (bots.console)
    "slack_client_secret": "SLACK_CLIENT_SECRET",
    "discord_client_id": "DISCORD_CLIENT_ID",
    "discord_client_secret": "DISCORD_CLIENT_SECRET",
}


def _alias(name: str) -> AliasChoices:
    return AliasChoices(_ENV_ALIASES[name], name)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TEAMMATE_",
        env_file=".env",
        env_file_encoding="utf-8",
        env_nested_delimiter="__",
        extra="ignore",  # load_settings refuses what is no setting, naming where it was found
        populate_by_name=True,
    )

    data_dir: Path = Path("./data")
    # `postgresql://...`: several instances share that database; unset: SQLite in data_dir.
    database_url: SecretStr | None = None
    # Several instances: how long a conversation's lease outlives a dead instance (its runs
    # are taken over after this; the survivors look every half of it, at most every 15 s).
    instance_lease_s: float = Field(default=30.0, ge=1.0, le=600.0)
    model: ModelId = Field(default=DEFAULT_MODEL, max_length=MAX_MODEL_ID_CHARS)
    thinking: Literal["off", "adaptive"] = "adaptive"
    max_output_tokens: int | None = Field(default=None, gt=0)
    max_turns: int = Field(default=50, ge=1, le=500)
    # A model stream silent this long (no byte, not even a ping) is cut and retried: a stuck
    # upstream must not hold a conversation for the SDK's ten minutes.
    model_idle_timeout_s: float = Field(default=90.0, gt=0, le=3600)
    # Runs working at once: in all, in one channel, for one person (None: no limit per
    # person), see `bots.fairness`. A flooded channel gets its share; the others are
    # answered meanwhile, and a freed slot goes to the channels in turn.
    max_concurrent_runs: int = Field(default=1024, ge=1, le=100_000)
    max_runs_per_channel: int = Field(default=64, ge=1, le=100_000)
    max_runs_per_user: int | None = Field(default=None, ge=1, le=100_000)
    # Added to the base prompt in every channel.
    system_prompt: str = Field(default="", max_length=MAX_PROMPT_CHARS)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    schedules: ScheduleSettings = Field(default_factory=ScheduleSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)  # MCP tool servers (tools.mcp)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)  # the web console
    # Who may use Teammate: platform user ids, and channel keys (or a whole platform, "slack").
    allowed_users: list[str] = Field(default_factory=list)  # empty: everyone
    allowed_channels: list[str] = Field(default_factory=list)  # empty: every channel

    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=_alias("anthropic_api_key")
    )
    anthropic_base_url: str | None = Field(
        default=None, validation_alias=_alias("anthropic_base_url")
    )
    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=_alias("slack_bot_token")
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=_alias("slack_app_token")
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias=_alias("slack_signing_secret")
    )
    slack_api_url: str | None = Field(default=None, validation_alias=_alias("slack_api_url"))
    discord_bot_token: SecretStr | None = Field(
        default=None, validation_alias=_alias("discord_bot_token")
    )
    discord_api_url: str | None = Field(default=None, validation_alias=_alias("discord_api_url"))
    discord_gateway_url: str | None = Field(
        default=None, validation_alias=_alias("discord_gateway_url")
    )
    slack_client_id: str | None = Field(default=None, validation_alias=_alias("slack_client_id"))
    slack_client_secret: SecretStr | None = Field(
        default=None, validation_alias=_alias("slack_client_secret")
    )
    discord_client_id: str | None = Field(
        default=None, validation_alias=_alias("discord_client_id")
    )
    discord_client_secret: SecretStr | None = Field(
        default=None, validation_alias=_alias("discord_client_secret")
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        config_file = config_path()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)

    # -- derived ---------------------------------------------------------------------------

    @property
    def database_path(self) -> Path:
        return self.data_dir / "teammate.db"

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    def channel(self, channel_key: str) -> ChannelSettings:
        """The settings of a channel: its own entry, else its platform's (`slack`), else none."""
        platform = channel_key.split(":", 1)[0]
        return self.channels.get(channel_key) or self.channels.get(platform) or _NO_CHANNEL

    def model_for(self, channel_key: str) -> str:
        return self.channel(channel_key).model or self.model

    def tools_for(self, channel_key: str) -> ToolsConfig:
        return self.channel(channel_key).tools or self.tools

    def timezone_for(self, channel_key: str) -> str:
        """The channel's time zone for scheduled work (an IANA name such as Europe/Berlin)."""
        return self.channel(channel_key).timezone or self.schedules.timezone

    def follow_ups_for(self, channel_key: str) -> bool:
        """Whether thread replies without a mention continue a conversation in the channel."""
        chosen = self.channel(channel_key).follow_ups
        if chosen is not None:
            return chosen
        return self.slack.follow_ups if channel_key.startswith("slack:") else True

    def secrets(self) -> list[str]:
        """Every configured secret value, for redaction: each `SecretStr` setting (the model's
        key, every platform's tokens), what `[mcp.servers]` names, the database URL's forms."""
        values = [getattr(self, name) for name in type(self).model_fields if name != "database_url"]
        found = [
            v.get_secret_value()
            for v in values
            if isinstance(v, SecretStr) and v.get_secret_value()
        ]
        console_secret = self.console.session_secret
        if console_secret is not None and console_secret.get_secret_value():
            found.append(console_secret.get_secret_value())
        found.extend(self.mcp.secret_values())  # what `[mcp.servers]` env/headers name
        url = self.database_url.get_secret_value() if self.database_url is not None else None
        return [*found, *dsn_secrets(url)]  # every form libpq takes: storage.dsn

    def private_paths(self) -> list[str]:
        """Teammate's own files, which no command it runs may see (tools.sandbox: shown empty):
        the data directory (the database, every channel's workspace, journals), the
        configuration file and the env file."""
        paths = [self.data_dir.resolve()]
        try:
            config = config_path()
        except SettingsError:
            config = None
        for path in (config, Path(".env")):
            if path is not None and path.is_file():
                paths.append(path.resolve())
        return [str(path) for path in paths]

    def require(self, name: str) -> str:
        """A secret that must be set for what is being started, or a one-line error naming it."""
        value = getattr(self, name)
        if value is None or (isinstance(value, SecretStr) and not value.get_secret_value()):
            raise SettingsError(f"{env_name(name)} is not set (needed for this command)")
        return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


def config_path() -> Path | None:
    """The TOML file: `TEAMMATE_CONFIG` if set (it must exist), else ./teammate.toml if any."""
    named = os.environ.get("TEAMMATE_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise SettingsError(f"TEAMMATE_CONFIG names {named!r}, which is not a file")
        return path
    default = Path("teammate.toml")
    return default if default.is_file() else None


def env_name(field_path: str) -> str:
    """The environment variable for a setting (`tools.bash_enabled` becomes
    TEAMMATE_TOOLS__BASH_ENABLED)."""
    head = field_path.split(".", 1)[0]
    if head in _ENV_ALIASES:
        return _ENV_ALIASES[head]
    return "TEAMMATE_" + field_path.replace(".", "__").upper()


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, `.env` and TOML; raises `SettingsError` (one line). A key,
    section or `TEAMMATE_*` variable that is no setting is refused (`bots.settings_check`)."""
    config_file = config_path()
    try:
        config = read_config(config_file) if config_file is not None else None
    except ConfigFileError as exc:
        raise SettingsError(str(exc)) from None
    dotenv = _dotenv()
    allowed = named_by_configuration(config, {**dotenv, **os.environ})
    unknown = [
        *(unknown_in_file(Settings, config) if config is not None else []),
        *unknown_variables(Settings, os.environ, "environment", allowed),
        *unknown_variables(Settings, dotenv, ".env", allowed),
    ]
    if unknown:  # all of them named, so that one start finds every misspelling
        others = ", ".join(f"`{name}`" for _, name in unknown[1:])
        more = f" (and {len(unknown) - 1} more: {others})" if others else ""
        raise SettingsError(unknown[0][0] + more)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = describe(first, Settings, config, [os.environ, dotenv], overrides)
        if where is None:
            where = env_name(".".join(str(part) for part in first["loc"]))
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise SettingsError(f"{where}: {first['msg']}{more}") from None
    except EnvSourceError as exc:  # a variable that is not the JSON its setting needs
        raise SettingsError(f"environment: {exc}") from None
    except (OSError, ValueError) as exc:  # the file changed since it was read
        raise SettingsError(f"configuration file: {exc}") from None
    except RecursionError:  # the TOML parser recurses per level of nesting
        raise SettingsError("configuration file: values nested too deeply") from None


def _dotenv() -> dict[str, str]:
    path = Path(".env")  # as `Settings.model_config["env_file"]`
    if not path.is_file():
        return {}
    return {k: v for k, v in dotenv_values(path, encoding="utf-8").items() if v is not None}
