"""Teammate on Discord end to end: the real discord.py bot against the fake Discord, the real
runner and SQLite store, and ScriptedModel. Assertions are on what the fake received.
Votes and channel configuration live in the store: a restart keeps them."""

from __future__ import annotations

import asyncio
import copy
import io
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bots.app import Closeable
from bots.features.channel_tools import channel_tools_factory
from bots.features.memory import ChannelMemory
from bots.platforms.discord.access import ADMIN_TEXT, GUILD_TEXT, PERSON_TEXT
from bots.platforms.discord.bot import DISCORD_RULES, FEEDBACK_TEXT, NO_THREADS_TEXT, TeammateBot
from bots.platforms.discord.events import stop_custom_id
from bots.platforms.discord.surface import TOKEN_LIFE_S, WORKING_TEXT, DiscordSurfaces
from bots.runner import ConversationRunner
from bots.settings import DiscordSettings, Settings
from core.messages import Text
from core.models.base import Model
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, AnyTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import channel_context
from tests.fakes.discord_server import BOT_TOKEN, FakeDiscord, user_payload

ROLE = "1600000000000000001"


class GateParams(BaseModel):
    pass


class GateTool(AgentTool[GateParams]):
    """Holds its run until `release` is set (or the run is stopped)."""

    name = "gate"
    label = "Wait at the gate"
    description = "Waits until released."
    parameters = GateParams

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = 0

    async def execute(self, call_id: str, params: GateParams, ctx: ToolContext) -> ToolResult:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return ToolResult.text("through the gate")


class Clock:
    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Teammate:
    fake: FakeDiscord
    runner: ConversationRunner
    store: SqliteStore
    model: ScriptedModel
    gate: GateTool
    clock: Clock
    settings: Settings
    general: str
    bot: TeammateBot | None = None
    task: asyncio.Task[None] | None = None
    started: list[TeammateBot] = field(default_factory=list)

    async def start_bot(self) -> TeammateBot:
        return await self.start_bot_with(None)

    async def start_bot_with(self, surfaces: DiscordSurfaces | None) -> TeammateBot:
        bot = TeammateBot(
            self.runner,
            self.settings,
            edit_interval_s=0.05,
            clock=self.clock,
            surfaces=surfaces,
            guild_ready_timeout=0.05,
        )
        task = asyncio.create_task(bot.start(BOT_TOKEN))
        ready = asyncio.create_task(bot.wait_until_ready())
        done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            ready.cancel()
            task.result()
        self.bot, self.task = bot, task
        self.started.append(bot)
        return bot

    async def stop_bot(self) -> None:
        if self.bot is not None:
            await self.bot.close()
            await asyncio.gather(self.task or asyncio.sleep(0), return_exceptions=True)
            self.bot = None

    async def mention(self, text: str, **kwargs: Any) -> dict[str, Any]:
        payload = self.fake.message_payload(self.general, text, mention_bot=True, **kwargs)
        await self.fake.dispatch("MESSAGE_CREATE", payload)
        return payload

    def contents(self, channel_id: str) -> list[str]:
        return [m["content"] for m in self.fake.channel_messages(channel_id)]

    async def shown(self, channel_id: str, text: str) -> None:
        await self.fake.wait_for(lambda: any(text in c for c in self.contents(channel_id)))


@pytest.fixture
def discord_settings() -> DiscordSettings:
    return DiscordSettings()


@pytest.fixture
async def teammate(
    fake_discord: FakeDiscord, tmp_path: Path, discord_settings: DiscordSettings
) -> AsyncIterator[Teammate]:
    async with started_teammate(fake_discord, tmp_path, discord_settings) as harness:
        yield harness


@asynccontextmanager
async def started_teammate(
    fake_discord: FakeDiscord,
    tmp_path: Path,
    discord_settings: DiscordSettings,
    *,
    model_factory: Callable[[Settings], Callable[[str], Model]] | None = None,
    tools: Sequence[AnyTool] | None = None,
    channel_tools: bool = False,
    **fields: Any,
) -> AsyncIterator[Teammate]:
    """The bot on a runner and store in `tmp_path`, ready. By default ScriptedModel and the
    gate tool; `model_factory` makes the runner's models from the settings instead (the real
    adapter), `tools` replaces the toolset, `channel_tools` adds remember / forget, and
    `fields` are more settings."""
    guild_id = next(iter(fake_discord.guilds))
    general = fake_discord.add_channel(guild_id, name="general")["id"]
    fake_discord.add_role(guild_id, name="teammates", role_id=ROLE)
    store = await SqliteStore.open(tmp_path / "teammate.db")
    model = ScriptedModel()
    gate = GateTool()
    settings = Settings(
        data_dir=tmp_path,
        discord=discord_settings.model_copy(update={"dev_guild_id": guild_id}),
        **fields,
    )
    models = model_factory(settings) if model_factory is not None else None
    toolset: Sequence[AnyTool] = [gate] if tools is None else tools
    memory = ChannelMemory(store, settings.memory, settings.secrets())
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=models if models is not None else lambda _model_id: model,
        toolset_factory=lambda _channel: toolset,
        platform_rules=DISCORD_RULES,
        channel_tools=channel_tools_factory(settings, memory) if channel_tools else None,
    )
    harness = Teammate(fake_discord, runner, store, model, gate, Clock(), settings, general)
    await harness.start_bot()
    try:
        yield harness
    finally:
        await harness.stop_bot()
        await runner.close()
        if isinstance(models, Closeable):
            await models.aclose()
        await store.close()


def custom_ids(message: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in message.get("components") or [] for c in row["components"]]


async def test_commands_are_synced_to_the_development_guild(teammate: Teammate) -> None:
    guild_id = next(iter(teammate.fake.guilds))
    (sync,) = teammate.fake.requests_to("PUT", rf"/applications/\d+/guilds/{guild_id}/commands")
    names = sorted(command["name"] for command in sync.json)
    assert names == ["ask", "new", "reset", "stop", "teammate", "usage"]
    (identify,) = teammate.fake.identifies
    assert identify["intents"] & (1 << 15)  # Message Content asked for, as configured


async def test_a_mention_opens_a_thread_and_a_message_in_it_continues(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="Hello Ada, rivers flow downhill."), Reply(text="Yes, always."))
    asked = await teammate.mention("do rivers flow downhill?")
    thread = asked["id"]  # a thread started from a message has the message's id
    await teammate.shown(thread, "rivers flow downhill")
    (create,) = teammate.fake.requests_to(
        "POST", rf"/channels/{teammate.general}/messages/{thread}/threads"
    )
    assert create.json["name"] == "do rivers flow downhill?"
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    (answer,) = teammate.fake.channel_messages(thread)
    assert answer["content"] == "Hello Ada, rivers flow downhill."
    assert custom_ids(answer) == [s for s in custom_ids(answer) if s.startswith("feedback:")]
    # In the thread, no mention needed (with the Message Content intent).
    follow_up = teammate.fake.message_payload(thread, "always?")
    await teammate.fake.dispatch("MESSAGE_CREATE", follow_up)
    await teammate.shown(thread, "Yes, always.")
    await teammate.runner.wait(key)
    second = teammate.model.requests[1]
    texts = [str(m.content) for m in second.messages]
    assert any("do rivers flow downhill?" in t for t in texts)
    assert any("always?" in t for t in texts)
    assert "Ada" in texts[-1]  # attributed by display name


async def test_the_same_gateway_message_twice_is_answered_once(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="once"))
    payload = await teammate.mention("hi")
    await teammate.fake.dispatch("MESSAGE_CREATE", payload)
    await teammate.shown(payload["id"], "once")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{payload['id']}"
    await teammate.runner.wait(key)
    # And again after a restart of the bot (its memory of recent deliveries is gone).
    await teammate.stop_bot()
    await teammate.start_bot()
    await teammate.fake.dispatch("MESSAGE_CREATE", payload)
    await teammate.fake.wait_for(
        lambda: (
            len(
                teammate.fake.requests_to(
                    "POST", rf"/channels/\d+/messages/{payload['id']}/threads"
                )
            )
            == 2
        )
    )
    await teammate.runner.wait(key)
    assert teammate.contents(payload["id"]) == ["once"]
    assert len(teammate.model.requests) == 1


async def test_ask_is_deferred_answered_and_continues_in_a_thread(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="Because of gravity."), Reply(text="Still gravity."))
    command = teammate.fake.slash_command(
        "ask", {"prompt": "why do rivers flow?"}, channel_id=teammate.general
    )
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    callback = rf"/interactions/{command['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    assert teammate.fake.requests_to("POST", callback)[0].json == {"type": 5}
    original = rf"/webhooks/\d+/{re.escape(command['token'])}/messages/@original"
    await teammate.fake.wait_for(
        lambda: any(
            (r.json or {}).get("content") == "Because of gravity."
            for r in teammate.fake.requests_to("PATCH", original)
        )
    )
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    thread = head["id"]
    assert thread in teammate.fake.channels  # a thread started from the answer
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    assert head["content"] == "Because of gravity."
    assert custom_ids(head)[0].startswith("feedback:")
    await teammate.fake.dispatch("MESSAGE_CREATE", teammate.fake.message_payload(thread, "sure?"))
    await teammate.shown(thread, "Still gravity.")
    await teammate.runner.wait(key)
    assert any("why do rivers flow?" in str(m.content) for m in teammate.model.requests[1].messages)


async def test_a_run_past_the_tokens_life_finishes_with_the_bot_token(teammate: Teammate) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]), Reply(text="Done at last."))
    command = teammate.fake.slash_command(
        "ask", {"prompt": "slow one"}, channel_id=teammate.general
    )
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    await teammate.gate.started.wait()
    teammate.clock.now += TOKEN_LIFE_S + 5
    teammate.fake.expire_interaction(command["token"])
    teammate.gate.release.set()
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    thread = head["id"]
    await teammate.shown(thread, "Done at last.")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    original = rf"/webhooks/\d+/{re.escape(command['token'])}/messages/@original"
    assert all(
        "Done at last." not in str(r.json) for r in teammate.fake.requests_to("PATCH", original)
    )
    posted = teammate.fake.requests_to("POST", rf"/channels/{thread}/messages")
    assert any((r.json or {}).get("content") == "Done at last." for r in posted)
    assert posted[0].headers["authorization"] == f"Bot {BOT_TOKEN}"


async def test_the_stop_button_cancels_the_run_also_after_a_restart(teammate: Teammate) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]))
    asked = await teammate.mention("wait for me")
    thread = asked["id"]
    await teammate.gate.started.wait()
    head = teammate.fake.channel_messages(thread)[0]
    assert head["content"] == WORKING_TEXT
    with_button = copy.deepcopy(head)  # as a client still showing the button has it
    (stop_id,) = custom_ids(head)
    assert stop_id.startswith("stop:") and stop_id.endswith(f":{thread}")
    press = teammate.fake.button_press(stop_id, head)
    await teammate.fake.dispatch("INTERACTION_CREATE", press)
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    assert teammate.gate.cancelled == 1
    callback = rf"/interactions/{press['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    (answered,) = teammate.fake.requests_to("POST", callback)
    assert answered.json["data"]["content"] == "Stopped." and answered.json["data"]["flags"] == 64
    assert custom_ids(teammate.fake.channel_messages(thread)[0]) == []  # the button is gone
    # After a restart the button still answers (the run is over: nothing to stop).
    await teammate.stop_bot()
    await teammate.start_bot()
    again = teammate.fake.button_press(stop_custom_id(1, thread), with_button)
    await teammate.fake.dispatch("INTERACTION_CREATE", again)
    callback = rf"/interactions/{again['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    assert (
        "already finished" in teammate.fake.requests_to("POST", callback)[0].json["data"]["content"]
    )


async def test_a_gateway_reconnect_during_a_run_loses_nothing(teammate: Teammate) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]), Reply(text="Answer after the storm."))
    asked = await teammate.mention("survive a reconnect")
    await teammate.gate.started.wait()
    await teammate.fake.disconnect()
    await teammate.fake.wait_for(lambda: len(teammate.fake.resumes) == 1 and teammate.fake.ready)
    teammate.gate.release.set()
    await teammate.shown(asked["id"], "Answer after the storm.")
    assert len(teammate.fake.identifies) == 1


@pytest.mark.parametrize("discord_settings", [DiscordSettings(allowed_roles=[ROLE])])
async def test_a_person_without_an_allowed_role_is_refused(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="for the team"))
    outsider = await teammate.mention("let me in")
    member = user_payload(1_400_000_000_000_000_005, "bea", global_name="Bea")
    welcome = await teammate.mention("me too", author=member, roles=[ROLE])
    await teammate.shown(welcome["id"], "for the team")
    # The outsider's mention, handled first, was ignored without a word or a thread.
    outsider_thread = rf"/channels/\d+/messages/{outsider['id']}/threads"
    assert not teammate.fake.requests_to("POST", outsider_thread)
    in_general = teammate.fake.channel_messages(teammate.general)
    assert all(m["author"]["id"] != teammate.fake.bot_id for m in in_general)
    command = teammate.fake.slash_command("ask", {"prompt": "x"}, channel_id=teammate.general)
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    callback = rf"/interactions/{command['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    refused = teammate.fake.requests_to("POST", callback)[0].json
    assert refused["type"] == 4 and refused["data"]["flags"] == 64
    assert refused["data"]["content"] == PERSON_TEXT
    assert len(teammate.model.requests) == 1


@pytest.mark.parametrize("discord_settings", [DiscordSettings(allowed_guilds=["1"])])
async def test_a_disallowed_guild_is_refused(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="never"))
    await teammate.mention("hello?")
    command = teammate.fake.slash_command("usage", channel_id=teammate.general)
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    callback = rf"/interactions/{command['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    refused = teammate.fake.requests_to("POST", callback)[0].json["data"]
    assert refused["content"] == GUILD_TEXT and refused["flags"] == 64
    # The mention came first and was ignored: no thread, no answer, no model call.
    assert not teammate.fake.requests_to("POST", r"/channels/\d+/messages/\d+/threads")
    assert teammate.model.requests == []


def png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


async def test_a_dm_with_files_images_reach_the_model_other_files_the_workspace(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(text="A red square, and your notes."))
    ada = user_payload(1_400_000_000_000_000_001, "ada", global_name="Ada")
    dm = teammate.fake.dm_channel(ada)["id"]
    image = teammate.fake.attachment("square.png", "image/png", png())
    notes = teammate.fake.attachment("notes.txt", "text/plain; charset=utf-8", b"remember")
    message = teammate.fake.message_payload(
        dm, "what is this?", author=ada, attachments=[image, notes]
    )
    await teammate.fake.dispatch("MESSAGE_CREATE", message)
    await teammate.shown(dm, "A red square")
    await teammate.runner.wait(f"discord:dm:{dm}")
    asked = teammate.model.requests[0].messages[-1]
    assert isinstance(asked.content, list)
    kinds = [part.type for part in asked.content]
    assert kinds == ["text", "image"]
    first = asked.content[0]
    assert isinstance(first, Text)
    assert "notes.txt" in first.text and "what is this?" in first.text
    saved = list((teammate.settings.workspaces_dir).rglob("notes*.txt"))
    assert [path.read_bytes() for path in saved] == [b"remember"]
    assert not teammate.fake.requests_to("POST", r"/channels/\d+/messages/\d+/threads")


async def test_without_the_message_content_intent_a_thread_needs_a_mention(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(text="first"), Reply(text="second"))
    await teammate.stop_bot()
    teammate.settings.discord.message_content = False
    await teammate.start_bot()
    assert not teammate.fake.identifies[-1]["intents"] & (1 << 15)
    asked = await teammate.mention("start")
    thread = asked["id"]
    await teammate.shown(thread, "first")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    # What Discord sends a bot without the intent: no content unless it is mentioned.
    await teammate.fake.dispatch("MESSAGE_CREATE", teammate.fake.message_payload(thread, ""))
    mentioned = teammate.fake.message_payload(thread, "again", mention_bot=True)
    await teammate.fake.dispatch("MESSAGE_CREATE", mentioned)
    await teammate.shown(thread, "second")
    await teammate.runner.wait(key)
    assert len(teammate.model.requests) == 2


async def test_a_thread_of_ours_continues_after_a_restart(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="first answer"), Reply(text="second answer"))
    asked = await teammate.mention("remember me")
    thread = asked["id"]
    await teammate.shown(thread, "first answer")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    await teammate.stop_bot()
    await teammate.start_bot()  # knows no thread until the store says so
    await teammate.fake.dispatch("MESSAGE_CREATE", teammate.fake.message_payload(thread, "again"))
    await teammate.shown(thread, "second answer")
    await teammate.runner.wait(key)
    # A plain message in the channel is not a conversation: no answer, no thread.
    await teammate.fake.dispatch(
        "MESSAGE_CREATE", teammate.fake.message_payload(teammate.general, "lunch?")
    )
    teammate.model.add(Reply(text="third answer"))
    await teammate.fake.dispatch("MESSAGE_CREATE", teammate.fake.message_payload(thread, "more"))
    await teammate.shown(thread, "third answer")
    assert len(teammate.model.requests) == 3


async def test_after_a_crash_the_run_is_closed_where_it_was_shown_and_its_stop_is_stale(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]))
    asked = await teammate.mention("a long job")
    thread = asked["id"]
    await teammate.gate.started.wait()
    head = copy.deepcopy(teammate.fake.channel_messages(thread)[0])
    (stop_id,) = custom_ids(head)
    # The process "dies": its bot is gone and its run is left "running" in the store.
    await teammate.stop_bot()
    surfaces = DiscordSurfaces()
    restarted = ConversationRunner(
        store=teammate.store,
        settings=teammate.settings,
        model_factory=lambda _model_id: teammate.model,
        toolset_factory=lambda _channel: [teammate.gate],
        platform_rules=DISCORD_RULES,
        surfaces=surfaces,
    )
    old_runner, teammate.runner = teammate.runner, restarted
    bot = await teammate.start_bot_with(surfaces)
    (recovered,) = await restarted.recover()
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await restarted.wait(key)
    assert recovered.outcome == "interrupted"
    shown = teammate.fake.channel_messages(thread)
    assert shown[0]["content"] == "⚠️ Interrupted" and custom_ids(shown[0]) == []
    assert "interrupted because Teammate restarted" in shown[-1]["content"]
    press = teammate.fake.button_press(stop_id, head)
    await teammate.fake.dispatch("INTERACTION_CREATE", press)
    callback = rf"/interactions/{press['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    answer = teammate.fake.requests_to("POST", callback)[0].json["data"]["content"]
    assert "already finished" in answer
    assert bot.is_ready()
    await old_runner.close()


async def test_bots_and_webhooks_are_never_answered_and_own_echoes_start_nothing(
    teammate: Teammate,
) -> None:
    other_bot = user_payload(1_500_000_000_000_000_009, "otherbot", bot=True)
    await teammate.mention("ping from a bot", author=other_bot)
    await teammate.mention("from a webhook", webhook_id="1900000000000000001")
    teammate.model.add(Reply(text="only for people"))
    person = await teammate.mention("a person asks")
    await teammate.shown(person["id"], "only for people")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{person['id']}"
    await teammate.runner.wait(key)
    # The fake echoed every message the bot posted back to it over the gateway, as Discord
    # does; none of them, nor the bot's or the webhook's, reached the model.
    assert len(teammate.model.requests) == 1
    threads = teammate.fake.requests_to("POST", r"/channels/\d+/messages/\d+/threads")
    assert [r.path.split("/")[4] for r in threads] == [person["id"]]


async def test_without_permission_to_start_threads_it_says_so_briefly(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="unused"))
    missing = {"message": "Missing Permissions", "code": 50013}
    teammate.fake.fail_next("POST", r"/channels/\d+/messages/\d+/threads", 403, missing)
    await teammate.mention("hello")
    await teammate.shown(teammate.general, NO_THREADS_TEXT)
    teammate.fake.fail_next("POST", r"/channels/\d+/messages/\d+/threads", 403, missing)
    command = teammate.fake.slash_command("ask", {"prompt": "x"}, channel_id=teammate.general)
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    original = rf"/webhooks/\d+/{re.escape(command['token'])}/messages/@original"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("PATCH", original)))
    assert teammate.fake.requests_to("PATCH", original)[0].json["content"] == NO_THREADS_TEXT
    assert teammate.model.requests == []


async def test_a_mention_saying_stop_in_the_thread_stops_the_run(teammate: Teammate) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]))
    asked = await teammate.mention("a long job")
    thread = asked["id"]
    await teammate.gate.started.wait()
    stop = teammate.fake.message_payload(thread, "stop", mention_bot=True)
    await teammate.fake.dispatch("MESSAGE_CREATE", stop)
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    assert teammate.gate.cancelled == 1
    await teammate.shown(thread, "Stopped.")
    assert len(teammate.model.requests) == 1  # "stop" was a command, not a message to answer


async def test_a_message_steered_into_a_running_answer_is_acknowledged_with_reactions(
    teammate: Teammate,
) -> None:
    teammate.model.add(Reply(tool_calls=[call("gate")]), Reply(text="Both answered."))
    asked = await teammate.mention("first part")
    thread = asked["id"]
    await teammate.gate.started.wait()
    steered = teammate.fake.message_payload(thread, "and a second part")
    await teammate.fake.dispatch("MESSAGE_CREATE", steered)
    reactions = rf"/channels/{thread}/messages/{steered['id']}/reactions/(.+)/@me"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("PUT", reactions)))
    teammate.gate.release.set()
    await teammate.shown(thread, "Both answered.")
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    emoji = [
        urllib.parse.unquote(r.path.split("/")[6])
        for r in teammate.fake.requests_to("PUT", reactions)
    ]
    assert emoji == ["👀", "✅"]
    # No acknowledgement was written into the thread.
    assert not any("Got it" in text for text in teammate.contents(thread))
    assert "and a second part" in str(teammate.model.requests[1].messages)


# -- feedback, /usage and /teammate config: stored (a restart keeps them) -------------------

ADA = 1_400_000_000_000_000_001  # the fake's default user
BOB = user_payload(1_400_000_000_000_000_002, "bob", global_name="Bob")


async def ephemeral(teammate: Teammate, payload: dict[str, Any]) -> str:
    """Dispatch an interaction; the content of its private answer."""
    await teammate.fake.dispatch("INTERACTION_CREATE", payload)
    callback = rf"/interactions/{payload['id']}/.+/callback"
    await teammate.fake.wait_for(lambda: bool(teammate.fake.requests_to("POST", callback)))
    (answer,) = teammate.fake.requests_to("POST", callback)
    assert answer.json["type"] == 4 and answer.json["data"]["flags"] == 64
    content = answer.json["data"]["content"]
    assert isinstance(content, str)
    return content


def config(teammate: Teammate, user: dict[str, Any] | None = None, **options: Any) -> Any:
    return teammate.fake.slash_command(
        "teammate", options, subcommand="config", channel_id=teammate.general, user=user
    )


async def test_votes_are_stored_with_the_run_and_usage_counts_them(teammate: Teammate) -> None:
    teammate.model.add(Reply(text="Forty-two."))
    asked = await teammate.mention("the answer?")
    thread = asked["id"]
    key = f"discord:{next(iter(teammate.fake.guilds))}:{thread}"
    await teammate.shown(thread, "Forty-two.")
    await teammate.runner.wait(key)
    (answer,) = teammate.fake.channel_messages(thread)
    up, down = custom_ids(answer)
    assert up.startswith("feedback:") and down.startswith("feedback:")
    usage = teammate.fake.slash_command("usage", channel_id=teammate.general)
    before = await ephemeral(teammate, usage)
    assert "1 answer ·" in before and "👍 0 👎 0" in before
    assert await ephemeral(teammate, teammate.fake.button_press(up, answer)) == FEEDBACK_TEXT
    assert await ephemeral(teammate, teammate.fake.button_press(down, answer, user=BOB)) == (
        FEEDBACK_TEXT
    )
    # Ada changes her mind: her vote is replaced, not added.
    await ephemeral(teammate, teammate.fake.button_press(down, answer))
    channel_key = f"discord:{next(iter(teammate.fake.guilds))}:{teammate.general}"
    summary = await teammate.store.usage_summary(0, channel_key=channel_key)
    assert (summary.runs, summary.votes_up, summary.votes_down) == (1, 0, 2)
    # /usage in the thread shows the channel's day too.
    in_thread = teammate.fake.slash_command("usage", channel_id=thread)
    after = await ephemeral(teammate, in_thread)
    assert "Today in this channel" in after and "👍 0 👎 2" in after


@pytest.mark.parametrize("discord_settings", [DiscordSettings(admin_users=[str(ADA)])])
async def test_admins_set_the_channels_prompt_and_model_and_a_restart_keeps_them(
    teammate: Teammate,
) -> None:
    assert await ephemeral(teammate, config(teammate, user=BOB)) == ADMIN_TEXT
    shown = await ephemeral(teammate, config(teammate))
    assert "extra instructions: none" in shown and "(configuration file)" in shown
    saved = await ephemeral(
        teammate, config(teammate, prompt="Answer like a pirate.", model="scripted")
    )
    assert saved.startswith("Saved")
    assert "“Answer like a pirate.” (set here)" in saved and "scripted (set here)" in saved
    refused = await ephemeral(teammate, config(teammate, tools="bash"))
    assert refused.startswith("Not allowed here: bash")
    refused = await ephemeral(teammate, config(teammate, model="gpt-nonsense"))
    assert "I don't know the model" in refused
    # A restart: a new store on the same file, a new runner, a new bot.
    await teammate.stop_bot()
    await teammate.runner.close()
    await teammate.store.close()
    chosen: list[str] = []
    teammate.store = await SqliteStore.open(teammate.settings.data_dir / "teammate.db")

    def factory(model_id: str) -> Any:
        chosen.append(model_id)
        return teammate.model

    teammate.runner = ConversationRunner(
        store=teammate.store,
        settings=teammate.settings,
        model_factory=factory,
        toolset_factory=lambda _channel: [teammate.gate],
        platform_rules=DISCORD_RULES,
    )
    await teammate.start_bot_with(None)
    shown = await ephemeral(teammate, config(teammate))
    assert "“Answer like a pirate.” (set here)" in shown
    teammate.model.add(Reply(text="Arr."))
    asked = await teammate.mention("hello")
    await teammate.shown(asked["id"], "Arr.")
    # The channel's instructions reach the model as a context note, not in the system prompt.
    assert "Answer like a pirate." in channel_context(teammate.model.requests[-1])
    assert "Answer like a pirate." not in teammate.model.requests[-1].system_prompt
    assert chosen == ["scripted"]
    cleared = await ephemeral(teammate, config(teammate, reset=True))
    assert "extra instructions: none" in cleared
    await teammate.runner.close()
    await teammate.store.close()
