"""The application's wiring: everything a front end needs, built from `Settings`.

Owns: opening the store under the data directory, the model factory (`create_model` with the
configured key, base URL, thinking and output limit), the per-channel toolset factory, the
`ConversationRunner`, logging (to a file in the data directory, secrets redacted), and `open_app`,
the async context manager that owns the lifetimes of the store, the runner, the models and
the MCP servers (`tools.mcp.McpHub`: started only when a channel's run needs them).

Must not: render anything (surfaces do), or read the environment itself (settings do).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from bots.errors import install_redaction
from bots.features.channel_tools import channel_tools_factory
from bots.features.memory import ChannelMemory
from bots.features.scheduler import Scheduler
from bots.features.schedules import Schedules
from bots.prompt import PlatformRules
from bots.runner import ConversationRunner
from bots.settings import Settings, SettingsError
from bots.surface.contract import SurfaceFactory
from core.models.base import Model
from core.models.catalog import LOCAL_MODELS, create_model
from core.tools import AnyTool
from storage.base import ConversationStore
from storage.postgres import PostgresStore, is_postgres_url, redact_url
from storage.sqlite import SqliteStore
from tools.toolset import build_toolset

if TYPE_CHECKING:
    from tools.mcp import McpHub

log = logging.getLogger(__name__)

LOG_FILE_NAME = "teammate.log"
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def uses_anthropic(model_id: str) -> bool:
    """Whether `model_id` is served by the Anthropic API (everything but the local models)."""
    return model_id not in LOCAL_MODELS


def require_model_credentials(settings: Settings, channel_key: str) -> None:
    """Raise `SettingsError` (naming ANTHROPIC_API_KEY) when the channel's model needs a key
    and none is configured, so a command fails at once instead of on the first message."""
    model_id = settings.model_for(channel_key)
    key = settings.anthropic_api_key
    if uses_anthropic(model_id) and (key is None or not key.get_secret_value()):
        raise SettingsError(
            f"ANTHROPIC_API_KEY is not set; the model {model_id} needs it "
            "(or try --model demo for a demo without one)"
        )


class ModelFactory:
    """Makes models for the runner from settings, and remembers them to close them."""

    def __init__(self, settings: Settings, **options: Any) -> None:
        """`options` go to the model unchanged (e.g. a test's fast `retry` policy)."""
        self._settings = settings
        self._options: dict[str, Any] = {"timeout_s": settings.model_idle_timeout_s} | options
        self._made: list[Model] = []

    def __call__(self, model_id: str) -> Model:
        key = self._settings.anthropic_api_key
        model = create_model(
            model_id,
            api_key=key.get_secret_value() if key is not None else None,
            base_url=self._settings.anthropic_base_url,
            thinking=self._settings.thinking,
            max_tokens=self._settings.max_output_tokens,
            **self._options,
        )
        self._made.append(model)
        return model

    async def aclose(self) -> None:
        for model in self._made:
            if isinstance(model, Closeable):
                try:
                    await model.aclose()
                except Exception:
                    log.exception("closing model %s failed", model.info.id)
        self._made.clear()


@runtime_checkable
class Closeable(Protocol):
    async def aclose(self) -> None: ...


@runtime_checkable
class Probeable(Protocol):
    """A model that can check, cheaply and without generating, that it is reachable with the
    configured credentials. Returns None when it is, else a one-line reason."""

    async def probe(self) -> str | None: ...


def toolset_factory(
    settings: Settings, mcp: McpHub | None = None
) -> Callable[[str], Awaitable[Sequence[AnyTool]]]:
    """A channel's tools: ours from its `ToolsConfig`, then its MCP servers' (tools.mcp)."""
    hidden = settings.private_paths()  # once: they do not change while the process runs

    async def build(channel_key: str) -> Sequence[AnyTool]:
        config = settings.tools_for(channel_key)
        tools = build_toolset(config, hidden_paths=hidden)
        if mcp is not None:
            tools.extend(await mcp.tools(config.mcp_servers))
        return tools

    return build


def mcp_hub(settings: Settings) -> McpHub | None:
    """The MCP servers of this process; none starts until a channel needs it. None when none
    is configured: the MCP SDK is then never imported (about a second of every start)."""
    if not settings.mcp.servers:
        return None
    from tools.mcp import McpHub

    return McpHub(settings.mcp, cache_dir=settings.data_dir)


@dataclass(slots=True)
class App:
    settings: Settings
    store: ConversationStore
    runner: ConversationRunner
    models: ModelFactory
    mcp: McpHub | None
    memory: ChannelMemory | None = None
    scheduler: Scheduler | None = None


def setup_logging(settings: Settings, *, stderr: TextIO | None = None) -> Path | None:
    """Log to `<data dir>/teammate.log` at the configured level (and to `stderr` if given),
    with every configured secret redacted. Returns the log file, or None if it can't be
    written (then warnings and worse go to stderr)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.setLevel(settings.log_level)
    formatter = logging.Formatter(_LOG_FORMAT)
    log_file: Path | None = settings.data_dir / LOG_FILE_NAME
    try:
        assert log_file is not None
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(formatter)
        root.addHandler(file_handler)
    except OSError:
        log_file = None
        if stderr is None:
            fallback = logging.StreamHandler(sys.stderr)
            fallback.setLevel(logging.WARNING)
            fallback.setFormatter(formatter)
            root.addHandler(fallback)
    if stderr is not None:
        console = logging.StreamHandler(stderr)
        console.setFormatter(formatter)
        root.addHandler(console)
    # Libraries' chatter (HTTP requests) is not ours to show at INFO.
    for noisy in ("httpx", "httpcore", "anthropic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    install_redaction(settings.secrets())
    return log_file


async def open_store(settings: Settings) -> ConversationStore:
    """PostgreSQL when `TEAMMATE_DATABASE_URL` names one, else the SQLite file in the data
    directory. Raises `SettingsError` (the URL's password never shown) if it can't be opened."""
    url = settings.database_url.get_secret_value() if settings.database_url else ""
    if url:
        if not is_postgres_url(url):
            raise SettingsError(
                f"TEAMMATE_DATABASE_URL: {redact_url(url)} is not a postgresql:// URL"
            )
        try:
            return await PostgresStore.open(url, lease_ttl_s=settings.instance_lease_s)
        except Exception as exc:
            raise SettingsError(
                f"the database {redact_url(url)} cannot be opened: "
                f"{_without(str(exc), settings.secrets())}"
            ) from None
    try:
        return await SqliteStore.open(settings.database_path)
    except Exception as exc:
        raise SettingsError(
            f"the database {settings.database_path} cannot be opened: {exc}"
        ) from None


def _without(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _require_writable(data_dir: Path) -> None:
    """The data directory holds the database and the log: refuse a read-only one at start
    with one line, rather than failing on the first message."""
    try:
        read_only = bool(os.statvfs(data_dir).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise SettingsError(f"TEAMMATE_DATA_DIR: {data_dir} is on a read-only file system")
    if not os.access(data_dir, os.W_OK):
        raise SettingsError(f"TEAMMATE_DATA_DIR: {data_dir} is not writable by this user")


@asynccontextmanager
async def open_app(
    settings: Settings,
    *,
    platform_rules: PlatformRules,
    surfaces: SurfaceFactory | None = None,
) -> AsyncIterator[App]:
    """Open the store and build the runner; on exit stop every run, close models and store.

    Raises `SettingsError` if the data directory or database can't be opened. Crash recovery
    (`runner.recover()`) leaves alone the runs of other live processes on the same database.
    """
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(
            f"TEAMMATE_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror}"
        ) from None
    _require_writable(settings.data_dir)
    store = await open_store(settings)
    models = ModelFactory(settings)
    mcp = mcp_hub(settings)
    toolsets = toolset_factory(settings, mcp)
    memory = ChannelMemory(store, settings.memory, settings.secrets())
    # Schedules post to chat platforms: offered in the channels of the platforms served here.
    platforms = [] if isinstance(platform_rules, str) else list(platform_rules)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=models,
        toolset_factory=toolsets,
        platform_rules=platform_rules,
        surfaces=surfaces,
        channel_tools=channel_tools_factory(
            settings, memory, Schedules(store, settings), platforms
        ),
    )
    scheduler = Scheduler(runner, settings)
    app = App(settings, store, runner, models, mcp=mcp, memory=memory, scheduler=scheduler)
    try:
        yield app
    finally:
        try:
            await scheduler.close()
            await runner.close()
        finally:
            if mcp is not None:
                await mcp.aclose()
            await models.aclose()
            await store.close()
