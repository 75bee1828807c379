"""A third platform is its translator, surface and client: `serve` takes it as it is.

`StubPlatform` below implements `bots.platform.Platform` in a few dozen lines and nothing
shared is edited for it: `serve` is given the registry plus the stub, and one message the
stub's client delivers is answered through the real runner and store (the scripted model) and
shown by the stub's surface. Slack and Discord are in the registry but not configured here, so
`serve` starts the stub alone.
"""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bots.features.scheduler import StartedThread
from bots.incoming import Incoming
from bots.platform import Report, ServeOptions
from bots.runner import ConversationRunner
from bots.serve import PLATFORMS, serve
from bots.settings import Settings
from bots.surface.contract import RunFinished, SurfaceEvent
from core.messages import Author

TIMEOUT_S = 30.0
STUB_RULES = "You are talking in Stub chat. Plain text only."


class StubSurface:
    """Shows a run by recording each answer's final text."""

    def __init__(self, conversation_key: str) -> None:
        self.conversation_key = conversation_key
        self.shown: list[str] = []
        self.done = asyncio.Event()

    @property
    def ref(self) -> dict[str, Any]:
        return {"platform": "stub", "conversation": self.conversation_key}

    async def emit(self, event: SurfaceEvent) -> None:
        if isinstance(event, RunFinished):
            self.shown.append(event.final_text)
            self.done.set()

    async def close(self) -> None:
        pass


class StubSurfaces:
    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> StubSurface | None:
        return StubSurface(conversation_key) if ref.get("platform") == "stub" else None


class StubClient:
    """The platform's connection: what a person types arrives here (translated to Incoming)."""

    def __init__(self, runner: ConversationRunner) -> None:
        self.runner = runner
        self.sent = 0

    async def deliver(self, channel: str, user: str, text: str) -> StubSurface:
        self.sent += 1
        key = f"stub:{channel}:{self.sent}"
        surface = StubSurface(key)
        incoming = Incoming(
            conversation_key=key,
            channel_key=f"stub:{channel}",
            author=Author(id=user, name=user),
            text=text,
            delivery_id=f"stub:{channel}:{self.sent}",
            timestamp=0.0,
        )
        await self.runner.submit(incoming, surface)
        return surface


class StubPlatform:
    name: ClassVar[str] = "stub"
    running: ClassVar[list[StubPlatform]] = []

    def __init__(self, settings: Settings, options: ServeOptions) -> None:
        self.surfaces = StubSurfaces()
        self.client: StubClient | None = None
        self.stopped: list[float] = []
        StubPlatform.running.append(self)

    @classmethod
    def configured(cls, settings: Settings) -> bool:
        return True

    @classmethod
    def require(cls, settings: Settings, options: ServeOptions) -> None:
        pass

    @classmethod
    def setup_hint(cls) -> list[str]:
        return ["  Stub:    always configured."]

    @classmethod
    async def doctor(cls, settings: Settings, report: Report) -> None:
        report("ok", "stub", "configured")

    @property
    def rules(self) -> str:
        return STUB_RULES

    async def start(self, runner: ConversationRunner) -> None:
        self.client = StubClient(runner)

    async def connect(self) -> str:
        return "Stub: connected."

    async def start_thread(self, channel_key: str, text: str, *, for_user: str) -> StartedThread:
        key = f"{channel_key}:scheduled"
        return StartedThread(key, StubSurface(key))

    async def stop(self, grace_s: float) -> None:
        self.stopped.append(grace_s)


@pytest.fixture(autouse=True)
def _no_stubs_left() -> None:
    StubPlatform.running.clear()


async def test_serve_runs_a_third_platform_end_to_end_through_the_runner(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", model="scripted")
    assert not any(platform.configured(settings) for platform in PLATFORMS)
    stop = asyncio.Event()
    connected: asyncio.Queue[list[str]] = asyncio.Queue()
    err = io.StringIO()
    serving = asyncio.create_task(
        serve(
            settings,
            err=err,
            platforms=(*PLATFORMS, StubPlatform),
            stop=stop,
            grace_s=1.0,
            ready=connected.put_nowait,
        )
    )
    try:
        assert await asyncio.wait_for(connected.get(), TIMEOUT_S) == ["Stub: connected."]
        (stub,) = StubPlatform.running
        assert stub.client is not None
        surface = await stub.client.deliver("general", "U1", "hello, stub")
        await asyncio.wait_for(surface.done.wait(), TIMEOUT_S)
    finally:
        stop.set()
        status = await asyncio.wait_for(serving, TIMEOUT_S)
    assert status == 0, err.getvalue()
    assert surface.shown == ["This is the scripted model: it answers the same to everything."]
    assert stub.stopped == [1.0]  # the graceful stop reached the platform
    assert "teammate: Stub: connected." in err.getvalue()
    assert "teammate: stopped." in err.getvalue()
    # The real store holds the conversation under the stub's key.
    with sqlite3.connect(tmp_path / "data" / "teammate.db") as db:
        keys = [str(row[0]) for row in db.execute("SELECT key FROM conversations")]
        outcomes = [str(row[0]) for row in db.execute("SELECT outcome FROM runs")]
    assert keys == ["stub:general:1"]
    assert outcomes == ["done"]
