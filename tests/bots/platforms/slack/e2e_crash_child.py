"""A Teammate Slack process that gets killed mid-answer (by test_e2e_lifecycle's crash test).

Serves HTTP mode on a free port (printed as `PORT <n>`), answers with a tool that never ends,
and prints `SHOWN` once the run is recorded (the test then waits for its in-progress message at
the fake; recovery finds that message by the run id it carries). Then it waits to be killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import running
from tests.fakes.slack_server import FakeSlack
from tests.fakes.waiting_tool import WaitTool


async def main(api_url: str, data_dir: Path) -> None:
    fake = FakeSlack()  # not started: only its names and tokens are used, the API is api_url's
    fake.base_url = api_url.removesuffix("api/")
    model = ScriptedModel([Reply(tool_calls=[call("wait")])])
    async with running(fake, data_dir, model, tools=[WaitTool()]) as app:
        print(f"PORT {app.port}", flush=True)
        while True:
            runs = await app.store.running_runs()
            if runs:
                break
            await asyncio.sleep(0.01)
        print("SHOWN", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
