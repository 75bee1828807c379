"""The PostgreSQL server restarted mid-run (issue 13), under the assembled Slack app on its
own throwaway cluster (a restart must not disturb other tests' server): the answer being
written when the server went away is reported in the thread and the log, history stays
replayable, and the next message is answered once the server is back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from core.history import unanswered_tool_calls
from tests.chaos.fault_kit import fake_anthropic, fake_slack, slack_app
from tests.chaos.test_fault_disk import captured_logs
from tests.fakes.anthropic_server import text_reply
from tests.storage import pg


@asynccontextmanager
async def own_cluster() -> AsyncIterator[pg.PgServer]:
    server = await asyncio.to_thread(pg.start_cluster)  # (it probes with its own loop)
    if server is None:
        pytest.skip(f"no throwaway PostgreSQL: {pg.unavailable_reason}")
    try:
        yield server
    finally:
        await asyncio.to_thread(pg.stop_cluster, server)


async def test_a_postgres_restart_mid_answer_is_said_and_service_resumes(tmp_path: Path) -> None:
    async with (
        own_cluster() as server,
        fake_slack() as slack,
        fake_anthropic() as model_api,
        slack_app(slack, model_api, tmp_path, database_url=server.url) as app,
    ):
        model_api.add(text_reply("first answer"))
        ts = await app.mention("first question")
        await app.settle()

        slow = text_reply("y" * 2_000, chunk_size=200)
        slow.event_delay_s = 0.2
        model_api.add(slow)
        with captured_logs() as logs:
            asked = await app.mention("a long answer, please", thread_ts=ts)
            while len(model_api.requests) < 2:  # noqa: ASYNC110 (the fake's own list)
                await asyncio.sleep(0.01)
            await asyncio.to_thread(pg.restart_cluster, server)
            await app.settle()
        shown = json.dumps([call.args for call in slack.calls], ensure_ascii=False)
        # The pool reconnects: the answer either completes (✅) or, if a write met the
        # restart, the thread and the log say what happened.
        answered = "white_check_mark" in slack.reactions("C1", asked)
        assert answered or "the database is unavailable" in shown, shown[-500:]
        assert "Traceback" not in shown
        if not answered:
            assert "run in slack:" in logs.text

        model_api.add(text_reply("answer after the restart"))
        await app.mention("are you back?", thread_ts=ts)
        await app.settle()
        assert "answer after the restart" in json.dumps(slack.bot_replies("C1", ts))
        conversation = await app.store.get_conversation(f"slack:{slack.team_id}:C1:{ts}")
        assert conversation is not None
        loaded = await app.store.load(conversation.id)
        history = [stored.message for stored in loaded.messages]
        assert unanswered_tool_calls(history) == []
        assert "first question" in history[0].text()
        assert history[-1].text() == "answer after the restart"
