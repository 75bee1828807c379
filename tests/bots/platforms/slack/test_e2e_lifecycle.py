"""End to end: AI-app assistant threads, a crash and the restart that reports it, shutdown."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from bots.recovery import INTERRUPTED_TEXT
from core.models.scripted import Reply, ScriptedModel, call
from tests.bots.platforms.slack.e2e_harness import ALICE, message_event, running, texts
from tests.fakes.slack_server import FakeSlack
from tests.fakes.waiting_tool import WaitTool

CRASH_CHILD = Path(__file__).with_name("e2e_crash_child.py")
REPO = Path(__file__).resolve().parents[4]


async def test_an_assistant_thread_gets_prompts_a_title_a_status_and_an_answer(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    # Slow enough (over the surface's working delay, ~1 s) for the status line to show.
    model = ScriptedModel(
        [Reply(thinking="Which channel?", text="Here is the summary.", latency_s=1.2)]
    )
    async with running(fake_slack, tmp_path, model, mode="socket") as app:
        started = {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": ALICE,
                "context": {"channel_id": "C1", "team_id": fake_slack.team_id},
                "channel_id": "D1",
                "thread_ts": "1796000000.000100",
            },
            "event_ts": "1796000000.000101",
        }
        await app.event(started)
        await app.settle()
        parent = fake_slack.seed_message("D1", "Hi, how can I help?", user=fake_slack.bot_user_id)
        question = message_event(
            fake_slack,
            "summarise #general today",
            channel="D1",
            mention=False,
            kind="message",
            thread_ts=parent["ts"],
        )
        await app.event(question)
        await app.settle()

    [prompts] = fake_slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert prompts.args["channel_id"] == "D1" and prompts.args["prompts"]
    [title] = fake_slack.calls_to("assistant.threads.setTitle")
    assert title.args["title"] == "summarise #general today"
    assert fake_slack.statuses, "the status line showed the thinking"
    assert "Here is the summary." in texts(fake_slack.bot_replies("D1", parent["ts"]))
    assert len(model.requests) == 1


async def test_a_run_interrupted_by_a_crash_is_reported_once_after_the_restart(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CRASH_CHILD),
        fake_slack.api_url,
        str(tmp_path),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        port_line = await asyncio.wait_for(child.stdout.readline(), 30)
        port = int(port_line.split()[1])
        event = message_event(fake_slack, "work forever")
        from tests.bots.platforms.slack.e2e_harness import SECRET
        from tests.fakes.slack_server import signed_request

        url = f"http://127.0.0.1:{port}/slack/events"
        response = await signed_request(url, fake_slack.event_callback(event), SECRET)
        assert response.status == 200
        assert (await asyncio.wait_for(child.stdout.readline(), 30)).strip() == b"SHOWN"
        await fake_slack.wait_for(lambda f: bool(f.bot_replies("C1", event["ts"])), 30)
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()

    model = ScriptedModel([])
    async with running(fake_slack, tmp_path, model) as app:  # recovers at start
        await app.settle()
    async with running(fake_slack, tmp_path, model) as app:  # nothing left to report
        await app.settle()

    replies = fake_slack.bot_replies("C1", event["ts"])
    assert [INTERRUPTED_TEXT in texts([reply]) for reply in replies].count(True) == 1
    assert "teammate_stop" not in texts(replies), "the stuck message lost its Stop button"
    assert "warning" in fake_slack.reactions("C1", event["ts"])  # ⚠️ interrupted, as on Discord
    assert model.requests == []


async def test_shutdown_finishes_accepted_work_and_stops_what_still_runs(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tool = WaitTool()
    model = ScriptedModel([Reply(tool_calls=[call("wait")]), Reply(text="quick answer")])
    async with running(fake_slack, tmp_path, model, tools=[tool]) as app:
        stuck = message_event(fake_slack, "wait", channel="C1")
        await app.event(stuck)
        await asyncio.wait_for(tool.started.wait(), 10)
        quick = message_event(fake_slack, "quick one", channel="C2")
        await app.event(quick)
        # Leaving the block shuts down at once: the quick answer is still delivered, the
        # stuck one is stopped and says so.
    assert "quick answer" in texts(fake_slack.bot_replies("C2", quick["ts"]))
    assert "white_check_mark" in fake_slack.reactions("C2", quick["ts"])
    assert tool.saw and tool.saw[0][0] is True
    assert "black_square_for_stop" in fake_slack.reactions("C1", stuck["ts"])


async def test_run_serves_until_stopped_then_shuts_down(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    from bots.platforms.slack.app import SLACK_RULES, SlackBot
    from bots.runner import ConversationRunner
    from storage.sqlite import SqliteStore
    from tests.bots.platforms.slack.e2e_harness import SECRET, settings_for
    from tests.fakes.slack_server import signed_request

    settings = settings_for(fake_slack, tmp_path)
    bot = SlackBot(settings)
    store = await SqliteStore.open(settings.database_path)
    model = ScriptedModel([Reply(text="served")])
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _model_id: model,
        toolset_factory=lambda _channel: [],
        platform_rules=SLACK_RULES,
        surfaces=bot.surfaces,
    )
    ports: asyncio.Queue[int | None] = asyncio.Queue()
    stop = asyncio.Event()
    serving = asyncio.create_task(
        bot.run(runner, mode="http", host="127.0.0.1", port=0, stop=stop, ready=ports.put_nowait)
    )
    try:
        port = await asyncio.wait_for(ports.get(), 10)
        event = message_event(fake_slack, "hello")
        url = f"http://127.0.0.1:{port}/slack/events"
        assert (await signed_request(url, fake_slack.event_callback(event), SECRET)).status == 200
        stop.set()  # at once: the acknowledged event is still answered
        await asyncio.wait_for(serving, 30)
    finally:
        stop.set()
        await runner.close()
        await store.close()
    assert "served" in texts(fake_slack.bot_replies("C1", event["ts"]))
    assert bot.pending_events == 0


async def test_an_event_arriving_while_shutting_down_is_not_acknowledged(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    from slack_bolt.request.async_request import AsyncBoltRequest

    model = ScriptedModel([Reply(text="before")])
    async with running(fake_slack, tmp_path, model, mode="socket") as app:
        await app.event(message_event(fake_slack, "hello"))
        await app.settle()
        await app.bot.shutdown(grace_s=5.0)
        late = fake_slack.event_callback(message_event(fake_slack, "too late"))
        response = await app.bot.bolt.async_dispatch(
            AsyncBoltRequest(body=late, mode="socket_mode")
        )
        await app.settle()
    # Not acknowledged: Slack delivers it again later, to the next process.
    assert response.status == 503
    assert len(model.requests) == 1


async def test_a_refused_token_or_no_slack_is_one_line_without_the_token(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    import pytest

    from bots.platforms.slack.app import SLACK_RULES, SlackBot, SlackStartError
    from bots.runner import ConversationRunner
    from storage.sqlite import SqliteStore
    from tests.bots.platforms.slack.e2e_harness import settings_for

    store = await SqliteStore.open(tmp_path / "teammate.db")
    try:
        for overrides, expected in (
            ({"slack_bot_token": "xoxb-not-valid"}, "refused SLACK_BOT_TOKEN"),
            ({"slack_api_url": "http://127.0.0.1:9/api/"}, "could not reach Slack"),
        ):
            settings = settings_for(fake_slack, tmp_path, **overrides)
            bot = SlackBot(settings)
            runner = ConversationRunner(
                store=store,
                settings=settings,
                model_factory=lambda _model_id: ScriptedModel([]),
                toolset_factory=lambda _channel: [],
                platform_rules=SLACK_RULES,
            )
            with pytest.raises(SlackStartError) as raised:
                await bot.start(runner)
            await bot.shutdown(grace_s=1.0)
            message = str(raised.value)
            assert expected in message and "\n" not in message
            assert "xoxb-" not in message
    finally:
        await store.close()
