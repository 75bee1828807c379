"""A Teammate process that gets killed mid-run (by test_runner's crash test).

It starts a run whose tool never finishes, prints TOOL-RUNNING once the tool is executing (so
the user message, the assistant's tool call and the run record are committed), then waits.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bots.runner import ConversationRunner
from bots.settings import Settings
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import SleepTool, incoming
from tests.fakes.recording_surface import RecordingSurface


async def main(db: Path, data_dir: Path) -> None:
    store = await SqliteStore.open(db)
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 3600})])])
    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=data_dir),
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [SleepTool()],
        platform_rules="",
    )
    surface = RecordingSurface("child")
    # Its own delivery id: the test numbers its deliveries evt-1, evt-2… from the same helper,
    # and a shared id would make the test's next message a duplicate of this one.
    await runner.submit(incoming("sleep forever", delivery="crash-child-1"), surface)
    # The runner persists each message before showing it, so once the tool shows as started the
    # user message, the assistant's tool call and the run record are all committed.
    await surface.wait_for(lambda s: s.tool_starts())
    print("TOOL-RUNNING", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
