"""A channel's stored configuration (`/teammate config`) shapes every new run: its extra
system prompt, model and tools, layered over the configuration file; across restarts."""

from __future__ import annotations

from pathlib import Path

from bots.prompt import is_context_note
from bots.runner import ConversationRunner
from bots.settings import ChannelConfig, ChannelSettings, Settings
from core.models.scripted import Reply, ScriptedModel
from core.tools import AnyTool
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import CHANNEL, KEY, SleepTool, channel_context, incoming
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tools.files import LsTool, ReadTool


class Models:
    """One scripted model per id, recording which ids the runner asked for."""

    def __init__(self) -> None:
        self.made: dict[str, ScriptedModel] = {}

    def __call__(self, model_id: str) -> ScriptedModel:
        return self.made.setdefault(model_id, ScriptedModel(default=Reply(text="ok")))


def runner_for(
    store: SqliteStore, tmp_path: Path, models: Models, tools: list[AnyTool]
) -> ConversationRunner:
    settings = Settings(
        data_dir=tmp_path,
        model="file-default",
        channels={CHANNEL: ChannelSettings(system_prompt="From the file.", model="file-model")},
    )
    return ConversationRunner(
        store=store,
        settings=settings,
        model_factory=models,
        toolset_factory=lambda _channel: tools,
        platform_rules="Plain text only.",
        surfaces=RecordingSurfaces(),
    )


async def ask(runner: ConversationRunner, text: str) -> None:
    await runner.submit(incoming(text), RecordingSurface())
    await runner.wait(KEY)


async def test_without_stored_configuration_the_file_decides(
    store: SqliteStore, tmp_path: Path
) -> None:
    models = Models()
    runner = runner_for(store, tmp_path, models, [ReadTool(), LsTool()])
    await ask(runner, "hi")
    await ask(runner, "again")

    (request, again) = models.made["file-model"].requests
    assert "From the file." in channel_context(request)
    assert "From the file." not in request.system_prompt  # appended, never edited in
    assert [tool.name for tool in request.tools] == ["read", "ls"]
    assert again.system_prompt == request.system_prompt  # byte-stable between runs
    # Unchanged: the note given once is not repeated; the second request replays the first.
    assert sum(is_context_note(m) for m in again.messages) == 1
    await runner.close()


async def test_stored_configuration_applies_to_the_next_run_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    models = Models()
    tools: list[AnyTool] = [ReadTool(), LsTool(), SleepTool()]
    async with SqliteStore.open(tmp_path / "teammate.db") as store:
        runner = runner_for(store, tmp_path, models, tools)
        await ask(runner, "before")
        stored = ChannelConfig(system_prompt="Stored: be brief.", model="stored", tools=("ls",))
        await store.set_channel_config(CHANNEL, stored.to_stored(), by="U1")
        await ask(runner, "after")
        await runner.close()

    (before,) = models.made["file-model"].requests
    (after,) = models.made["stored"].requests
    assert "From the file." in channel_context(before)
    assert "Stored: be brief." in channel_context(after)
    assert "From the file." not in channel_context(after)  # the stored prompt replaces it
    assert after.system_prompt == before.system_prompt  # what was sent is never edited
    # The change is appended to the conversation: the earlier note is still there, as sent.
    notes = [m for m in after.messages if is_context_note(m)]
    assert len(notes) == 2 and "From the file." in notes[0].text()
    assert [tool.name for tool in after.tools] == ["ls"]

    async with SqliteStore.open(tmp_path / "teammate.db") as store:
        runner = runner_for(store, tmp_path, models, tools)
        await ask(runner, "after a restart")
        await runner.close()
    first, restarted = models.made["stored"].requests
    assert restarted.system_prompt == first.system_prompt
    assert channel_context(restarted) == channel_context(first)
    assert sum(is_context_note(m) for m in restarted.messages) == 2  # nothing new to say
    assert [tool.name for tool in restarted.tools] == ["ls"]


async def test_stored_tools_never_grant_a_tool_the_file_does_not(
    store: SqliteStore, tmp_path: Path
) -> None:
    models = Models()
    runner = runner_for(store, tmp_path, models, [ReadTool()])
    await store.set_channel_config(CHANNEL, {"tools": ["read", "bash", "write"]}, by="U1")
    await ask(runner, "hi")

    (request,) = models.made["file-model"].requests
    assert [tool.name for tool in request.tools] == ["read"]
    await runner.close()


async def test_fields_not_stored_keep_the_files_values(store: SqliteStore, tmp_path: Path) -> None:
    models = Models()
    runner = runner_for(store, tmp_path, models, [ReadTool(), LsTool()])
    await store.set_channel_config(CHANNEL, {"model": "stored"}, by="U1")
    await ask(runner, "hi")

    (request,) = models.made["stored"].requests
    assert "From the file." in channel_context(request)
    assert [tool.name for tool in request.tools] == ["read", "ls"]
    await runner.close()


async def test_an_unreadable_stored_configuration_is_ignored_not_fatal(
    store: SqliteStore, tmp_path: Path
) -> None:
    models = Models()
    runner = runner_for(store, tmp_path, models, [ReadTool()])
    await store.set_channel_config(CHANNEL, {"tools": "not a list", "model": 7}, by="U1")
    await ask(runner, "hi")

    (request,) = models.made["file-model"].requests
    assert "From the file." in channel_context(request)
    await runner.close()


async def test_one_runner_for_several_platforms_gives_each_channel_its_own_platforms_rules(
    store: SqliteStore, tmp_path: Path
) -> None:
    # `teammate serve` with Slack and Discord: one runner, and a Slack channel's prompt must
    # not carry Discord's formatting rules (nor the other way round).
    models = Models()
    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path, model="m"),
        model_factory=models,
        toolset_factory=lambda _channel: [],
        platform_rules={"slack": "Slack markdown rules.", "discord": "Discord markdown rules."},
        surfaces=RecordingSurfaces(),
    )
    await ask(runner, "from slack")
    discord_key = "discord:G1:T9"
    await runner.submit(
        incoming("from discord", key=discord_key, channel="discord:G1:C1"),
        RecordingSurface(),
    )
    await runner.wait(discord_key)

    slack, discord = models.made["m"].requests
    assert "Slack markdown rules." in slack.system_prompt
    assert "Discord" not in slack.system_prompt
    assert "Discord markdown rules." in discord.system_prompt
    assert "Slack" not in discord.system_prompt
    await runner.close()


async def test_a_stored_model_that_has_since_retired_answers_with_the_deployments_model(
    store: SqliteStore, tmp_path: Path
) -> None:
    # Saved with /teammate config while it still ran (config refuses it now): the channel keeps
    # being answered, by the deployment's model, and people are told why and what to do.
    models = Models()
    runner = runner_for(store, tmp_path, models, [ReadTool()])
    await store.set_channel_config(CHANNEL, {"model": "claude-opus-4-1"}, by="U1")
    surface = RecordingSurface()
    await runner.submit(incoming("hi"), surface)
    await runner.wait(KEY)

    assert "claude-opus-4-1" not in models.made
    assert [end.outcome for end in surface.finished()] == ["done"]
    (notice,) = surface.notices()
    assert "claude-opus-4-1 was retired on 2026-08-05" in notice.text
    assert "using file-default" in notice.text and "/teammate config model" in notice.text
    await runner.close()
