"""`/teammate` end to end: signed slash-command requests through the real bolt app, the real
runner on a real store, against FakeSlack; answers are the ephemeral acknowledgement."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bots.platforms.slack.app import SLACK_RULES, SlackBot
from bots.platforms.slack.commands import WORKING_TEXT, register_commands
from bots.runner import ConversationRunner
from core.messages import Usage
from core.models.scripted import Reply, ScriptedModel
from core.tools import AnyTool
from storage.sqlite import SqliteStore
from tests.bots.platforms.slack.e2e_harness import ALICE, BOB, SECRET, message_event, settings_for
from tests.bots.runner_helpers import channel_context
from tests.fakes.slack_server import FakeSlack, form_body, signed_request
from tools.files import LsTool, ReadTool

CHANNEL = "C1"


@dataclass
class App:
    fake: FakeSlack
    bot: SlackBot
    runner: ConversationRunner
    store: SqliteStore
    models: dict[str, ScriptedModel]
    port: int

    async def command(
        self, text: str, *, user: str = ALICE, channel: str = CHANNEL
    ) -> dict[str, Any]:
        body = form_body(
            {
                "command": "/teammate",
                "text": text,
                "user_id": user,
                "user_name": user.lower(),
                "channel_id": channel,
                "channel_name": "general",
                "team_id": self.fake.team_id,
                "response_url": f"{self.fake.base_url}respond/1",
                "trigger_id": "1.2.3",
            }
        )
        response = await signed_request(f"http://127.0.0.1:{self.port}/slack/events", body, SECRET)
        assert response.status == 200, response.text
        answer: dict[str, Any] = response.json()
        assert answer["response_type"] == "ephemeral"
        return answer

    async def mention(self, text: str, *, channel: str = CHANNEL) -> str:
        event = message_event(self.fake, text, channel=channel)
        await signed_request(
            f"http://127.0.0.1:{self.port}/slack/events",
            self.fake.event_callback(event),
            SECRET,
        )
        await self.bot.drain()
        return str(event["ts"])


@asynccontextmanager
async def running(
    fake: FakeSlack,
    data_dir: Path,
    *,
    tools: Sequence[AnyTool] = (),
    models: dict[str, ScriptedModel] | None = None,
    **overrides: Any,
) -> AsyncIterator[App]:
    settings = settings_for(fake, data_dir, **overrides)
    bot = SlackBot(settings)
    store = await SqliteStore.open(settings.database_path)
    made = models if models is not None else {}

    def model_for(model_id: str) -> ScriptedModel:
        return made.setdefault(model_id, ScriptedModel(default=Reply(text="ok")))

    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=model_for,
        toolset_factory=lambda _channel: tools,
        platform_rules=SLACK_RULES,
        surfaces=bot.surfaces,
    )
    register_commands(bot.bolt, runner=runner, settings=settings, spawn=bot.spawn)
    try:
        await bot.start(runner)
        await runner.recover()
        port = await bot.listen_http("127.0.0.1", 0)
        yield App(fake, bot, runner, store, made, port)
    finally:
        await bot.shutdown(grace_s=5.0)
        await runner.close()
        await store.close()


async def test_help_says_slash_commands_do_not_work_in_threads(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path) as app:
        for text in ("", "help"):
            answer = await app.command(text)
            assert "don't work inside threads" in answer["text"]
            assert "@teammate stop" in answer["text"]
        unknown = await app.command("dance")
        assert "I don't know `dance`" in unknown["text"]


async def test_usage_shows_this_channels_day_with_votes(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path) as app:
        await app.mention("hello")
        await app.runner.wait_all()
        other = await app.mention("elsewhere", channel="C2")
        await app.runner.wait_all()
        summary = await app.store.usage_summary(0, channel_key=f"slack:{fake_slack.team_id}:C1")
        assert summary.runs == 1
        conversation = await app.store.get_conversation(f"slack:{fake_slack.team_id}:C2:{other}")
        assert conversation is not None
        # A vote on this channel's answer, and one on another channel's.
        runs = await app.store.usage_summary(0)
        assert runs.runs == 2
        run_ids = [run_id for run_id, _outcome in runs_of(tmp_path)]
        await app.store.set_run_feedback(run_ids[0], ALICE, "up")
        await app.store.set_run_feedback(run_ids[0], BOB, "down")
        await app.store.set_run_feedback(run_ids[1], BOB, "down")

        answer = await app.command("usage")
    assert "1 answer ·" in answer["text"]
    assert "👍 1 👎 1" in answer["text"]
    assert "$0.00" in answer["text"]


def runs_of(data_dir: Path) -> list[tuple[int, str]]:
    """Every run's id and outcome, read from the database file."""
    with sqlite3.connect(data_dir / "teammate.db") as db:
        return [(int(r[0]), str(r[1])) for r in db.execute("SELECT id, outcome FROM runs")]


async def test_usage_counts_tokens_and_cost(fake_slack: FakeSlack, tmp_path: Path) -> None:
    models = {
        "scripted": ScriptedModel(
            default=Reply(text="ok", usage=Usage(input=1200, output=34, cache_read=5000))
        )
    }
    async with running(fake_slack, tmp_path, models=models) as app:
        await app.mention("hello")
        await app.runner.wait_all()
        answer = await app.command("usage")
    assert "6,200 tokens read (5,000 of them cached), 34 written" in answer["text"]
    assert "$0.0056" in answer["text"]  # the model's prices: 1,200 in, 34 out, 5,000 cached


async def test_stop_stops_every_answer_in_progress_in_the_channel(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    slow = ScriptedModel(
        default=Reply(text="a long answer " * 50, chunk_delay_s=0.05, chunk_size=4)
    )
    async with running(fake_slack, tmp_path, models={"scripted": slow}) as app:
        assert (await app.command("stop"))["text"] == "Nothing is in progress in this channel."
        await app.mention("one")
        await app.mention("two")
        assert len(app.runner.running_in(f"slack:{fake_slack.team_id}:{CHANNEL}")) == 2

        answer = await app.command("stop")
        assert answer["text"] == "Stopped 2 answers in this channel."
        await app.runner.wait_all()
    assert [outcome for _id, outcome in runs_of(tmp_path)] == ["aborted", "aborted"]


async def test_reset_makes_every_thread_of_the_channel_start_afresh(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with running(fake_slack, tmp_path) as app:
        assert "nothing to forget" in (await app.command("reset"))["text"]
        first = await app.mention("remember the word PELICAN")
        await app.runner.wait_all()
        elsewhere = await app.mention("remember FLAMINGO", channel="C2")
        await app.runner.wait_all()

        answer = await app.command("reset")
        assert "forgotten 1 thread" in answer["text"]

        model = app.models["scripted"]
        follow_up = message_event(fake_slack, "what was the word?", thread_ts=first)
        await signed_request(
            f"http://127.0.0.1:{app.port}/slack/events",
            fake_slack.event_callback(follow_up),
            SECRET,
        )
        await app.bot.drain()
        await app.runner.wait_all()
        sent = str(model.requests[-1].messages)
        assert "PELICAN" not in sent and "what was the word?" in sent

        other = message_event(fake_slack, "and here?", channel="C2", thread_ts=elsewhere)
        await signed_request(
            f"http://127.0.0.1:{app.port}/slack/events", fake_slack.event_callback(other), SECRET
        )
        await app.bot.drain()
        await app.runner.wait_all()
        assert "FLAMINGO" in str(model.requests[-1].messages)  # another channel: untouched


async def test_config_is_for_admins_only(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with running(fake_slack, tmp_path, slack={"admins": [BOB]}) as app:
        refused = await app.command("config model claude-opus-4-6")
        assert "Only Teammate's admins" in refused["text"]
        assert await app.store.get_channel_config(f"slack:{fake_slack.team_id}:C1") is None


async def test_config_set_by_an_admin_survives_a_restart_and_shapes_answers(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    tools: list[AnyTool] = [ReadTool(), LsTool()]
    settings: dict[str, Any] = {"slack": {"admins": [ALICE]}, "anthropic_api_key": "sk-test"}
    models: dict[str, ScriptedModel] = {}
    async with running(fake_slack, tmp_path, tools=tools, models=models, **settings) as app:
        shown = await app.command("config")
        assert "scripted (configuration file)" in shown["text"]
        assert "read, write, edit, ls, find, grep, web_fetch (configuration file)" in shown["text"]

        assert "Saved" in (await app.command("config prompt Answer in French."))["text"]
        assert "Saved" in (await app.command("config tools ls"))["text"]
        saved = await app.command("config model claude-opus-4-6")
        assert "claude-opus-4-6 (set here)" in saved["text"]
        refused = await app.command("config tools ls,bash")
        assert "Not allowed here: bash" in refused["text"]
        unknown = await app.command("config model gpt-9")
        assert "I don't know the model `gpt-9`" in unknown["text"]
        retired = await app.command("config model claude-opus-4-1")
        assert "retired on 2026-08-05" in retired["text"] and "claude-opus-5-5" in retired["text"]

    async with running(fake_slack, tmp_path, tools=tools, models=models, **settings) as app:
        shown = await app.command("config")
        assert "“Answer in French.” (set here)" in shown["text"]
        assert "• tools: ls (set here)" in shown["text"]
        assert "claude-opus-4-6 (set here)" in shown["text"]
        await app.mention("bonjour")
        await app.runner.wait_all()
        (request,) = models["claude-opus-4-6"].requests
        assert "Answer in French." in channel_context(request)
        assert [tool.name for tool in request.tools] == ["ls"]

        reset = await app.command("config reset")
        assert "scripted (configuration file)" in reset["text"]
        assert await app.store.get_channel_config(f"slack:{fake_slack.team_id}:C1") == {}


async def test_a_channel_outside_the_allow_list_gets_a_polite_note(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    allowed = [f"slack:{fake_slack.team_id}:C9"]
    async with running(fake_slack, tmp_path, allowed_channels=allowed) as app:
        answer = await app.command("usage")
    assert "not enabled in this channel" in answer["text"]


async def test_dms_turned_off_are_refused_politely(fake_slack: FakeSlack, tmp_path: Path) -> None:
    async with running(fake_slack, tmp_path, slack={"dms_enabled": False}) as app:
        answer = await app.command("usage", channel="D123")
    assert "Direct messages with Teammate are turned off" in answer["text"]


async def test_a_slow_answer_is_acknowledged_then_sent_to_the_response_url(
    fake_slack: FakeSlack, tmp_path: Path, monkeypatch: Any
) -> None:
    import bots.platforms.slack.commands as commands

    monkeypatch.setattr(commands, "ANSWER_WITHIN_S", 0.0)
    received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with running(fake_slack, tmp_path) as app:
        from aiohttp import web

        async def respond(request: web.Request) -> web.Response:
            await received.put(await request.json())
            return web.Response(text="ok")

        web_app = web.Application()
        web_app.router.add_post("/respond", respond)
        site_runner = web.AppRunner(web_app)
        await site_runner.setup()
        site = web.TCPSite(site_runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            body = form_body(
                {
                    "command": "/teammate",
                    "text": "help",
                    "user_id": ALICE,
                    "user_name": "alice",
                    "channel_id": CHANNEL,
                    "team_id": fake_slack.team_id,
                    "response_url": f"http://127.0.0.1:{port}/respond",
                }
            )
            response = await signed_request(
                f"http://127.0.0.1:{app.port}/slack/events", body, SECRET
            )
            assert response.json()["text"] == WORKING_TEXT
            later = await asyncio.wait_for(received.get(), 10)
        finally:
            await site_runner.cleanup()
    assert later["response_type"] == "ephemeral"
    assert "don't work inside threads" in later["text"]
