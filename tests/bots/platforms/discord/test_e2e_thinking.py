"""A Discord thread on the default model, whose replies carry signed thinking, keeps answering
after someone changed the channel's memory or its configuration between two questions.

The real discord.py bot against the fake Discord, the real runner and store, and the real
Anthropic adapter against the fake Messages API, which refuses replayed thinking whose prefix
changed exactly as the API does (a 400, forever, unless the request asks to drop it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bots.app import ModelFactory
from bots.settings import DiscordSettings
from tests.bots.platforms.discord.test_bot_e2e import (
    ADA,
    Teammate,
    config,
    ephemeral,
    started_teammate,
)
from tests.bots.thinking_e2e import (
    CONTEXT_OPEN,
    MODEL_ID,
    answer,
    api_settings,
    assert_appended,
    assert_never_refused,
    fake_messages_api,
    guards,
    last_user_text,
    message_requests,
    replays_thinking,
    tool_call,
)
from tests.fakes.discord_server import FakeDiscord
from tools.files import LsTool, ReadTool


async def ask_in_thread(teammate: Teammate, thread: str, text: str, shown: str) -> None:
    """A follow-up in the thread, answered and shown."""
    await teammate.fake.dispatch("MESSAGE_CREATE", teammate.fake.message_payload(thread, text))
    await teammate.shown(thread, shown)
    await teammate.runner.wait(thread_key(teammate, thread))


def answers(teammate: Teammate, channel_id: str) -> list[str]:
    """What Teammate posted in the channel, in order."""
    return [
        m["content"]
        for m in teammate.fake.channel_messages(channel_id)
        if m["author"]["id"] == teammate.fake.bot_id
    ]


def thread_key(teammate: Teammate, thread: str) -> str:
    return f"discord:{next(iter(teammate.fake.guilds))}:{thread}"


def memory_add(teammate: Teammate, text: str) -> Any:
    return teammate.fake.slash_command(
        "teammate", {"add": text}, subcommand="memory", channel_id=teammate.general
    )


async def test_a_thread_answers_after_someone_added_to_the_channels_memory(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    async with fake_messages_api() as fake:
        fake.add(
            answer("Nobody told me yet.", "s1"),
            answer("On Thursdays.", "s2"),
        )
        async with started_teammate(
            fake_discord,
            tmp_path,
            DiscordSettings(),
            model_factory=ModelFactory,
            channel_tools=True,
            model=MODEL_ID,
            **api_settings(fake),
        ) as teammate:
            asked = await teammate.mention("when are releases cut?")
            thread = asked["id"]
            await teammate.shown(thread, "Nobody told me yet.")
            await teammate.runner.wait(thread_key(teammate, thread))
            note = "Releases are cut on Thursdays."
            added = await ephemeral(teammate, memory_add(teammate, note))
            assert added == f"Remembered as #1: {note}"
            await ask_in_thread(teammate, thread, "and now?", "On Thursdays.")
            shown = answers(teammate, thread)

    assert shown == ["Nobody told me yet.", "On Thursdays."]
    assert_never_refused(fake)
    first, second = message_requests(fake)
    # The note was appended after the new question; nothing sent before was changed, so no
    # guard was needed.
    assert guards(fake) == [False, False]
    assert_appended(first, second)
    assert CONTEXT_OPEN in last_user_text(second)
    assert "Releases are cut on Thursdays." in last_user_text(second)
    assert replays_thinking(second, "s1")
    assert fake.dropped_thinking == 0


async def test_a_thread_answers_after_an_admin_changed_the_channels_prompt_and_tools(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    async with fake_messages_api() as fake:
        fake.add(
            tool_call("ls", {}, call_id="t1", signature="s1"),
            answer("The workspace is empty.", "s2"),
            answer("Arr, 'tis empty.", "s3"),
            answer("Arr, I can only read files now.", "s4"),
        )
        async with started_teammate(
            fake_discord,
            tmp_path,
            DiscordSettings(admin_users=[str(ADA)]),
            model_factory=ModelFactory,
            tools=[ReadTool(), LsTool()],
            model=MODEL_ID,
            **api_settings(fake),
        ) as teammate:
            asked = await teammate.mention("what is in the workspace?")
            thread = asked["id"]
            await teammate.shown(thread, "The workspace is empty.")
            await teammate.runner.wait(thread_key(teammate, thread))

            saved = await ephemeral(teammate, config(teammate, prompt="Answer like a pirate."))
            assert saved.startswith("Saved"), saved
            await ask_in_thread(teammate, thread, "say it again", "Arr, 'tis empty.")

            saved = await ephemeral(teammate, config(teammate, tools="read"))
            assert saved.startswith("Saved"), saved
            await ask_in_thread(teammate, thread, "can you still list?", "only read files now")
            shown = "\n".join(answers(teammate, thread))

    assert "The workspace is empty." in shown and "Arr, 'tis empty." in shown
    assert "refused" not in shown
    assert_never_refused(fake)
    listed, after_tool, reprompted, narrowed = message_requests(fake)
    # The channel's instructions are appended as a note, never put into the system prompt:
    # no guard. Narrowing the tools changes what comes before every message: the replayed
    # thinking lost its prefix, so that request asked for it to be dropped, and was answered.
    assert guards(fake) == [False, False, False, True]
    assert_appended(after_tool, reprompted)
    assert "Answer like a pirate." in last_user_text(reprompted)
    assert "pirate" not in str(reprompted.body["system"])
    assert [t["name"] for t in listed.body["tools"]] == ["read", "ls"]
    assert [t["name"] for t in narrowed.body["tools"]] == ["read"]
    assert narrowed.body["system"] == listed.body["system"]
    assert fake.dropped_thinking > 0
