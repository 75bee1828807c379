"""`DiscordSurface` against the fake Discord with the real discord.py: what people would see
is asserted on what the fake received."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import discord
import pytest
from discord.ext import commands

from bots.platforms.discord.events import parse_custom_id
from bots.platforms.discord.surface import (
    MAX_UPLOAD_BYTES,
    MESSAGE_LIMIT,
    TOKEN_LIFE_S,
    WORKING_TEXT,
    DiscordSurface,
    DiscordSurfaces,
    attached_text,
)
from bots.surface.contract import FileOut, Notice, RunFinished, RunStarted
from bots.surface.markdown_split import _open_fence
from core.events import (
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from core.messages import AssistantMessage, Author, Text, ToolResultMessage, Usage
from core.models.base import TextDelta
from tests.fakes.discord_server import FakeDiscord

RUN = 7
ADA = Author(id="1400000000000000001", name="Ada")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def general(fake: FakeDiscord) -> str:
    return next(c["id"] for c in fake.channels.values() if c.get("name") == "general")


def surface_in(bot: commands.Bot, channel_id: str, **kwargs: Any) -> DiscordSurface:
    return DiscordSurface(
        bot.get_partial_messageable(int(channel_id)), channel_id=int(channel_id), **kwargs
    )


def key(channel_id: str) -> str:
    return f"discord:1:{channel_id}"


async def stream(surface: DiscordSurface, text: str, chunk: int = 40) -> None:
    partial = AssistantMessage()
    await surface.emit(MessageStart(message=partial))
    for start in range(0, len(text), chunk):
        await surface.emit(
            MessageUpdate(
                message=partial,
                delta=TextDelta(partial=partial, index=0, delta=text[start : start + chunk]),
            )
        )
    await surface.emit(MessageEnd(message=AssistantMessage(content=[Text(text=text)])))


def finished(channel_id: str, text: str, outcome: Any = "done", **kwargs: Any) -> RunFinished:
    return RunFinished(key(channel_id), RUN, outcome, Usage(), text, **kwargs)


def custom_ids(message: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in message.get("components") or [] for c in row["components"]]


def posts(fake: FakeDiscord, channel_id: str) -> list[Any]:
    return fake.requests_to("POST", rf"/channels/{channel_id}/messages")


def edits(fake: FakeDiscord, channel_id: str) -> list[Any]:
    return fake.requests_to("PATCH", rf"/channels/{channel_id}/messages/\d+")


async def test_a_plain_answer_streams_into_the_head_and_ends_with_feedback_buttons(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    (head,) = fake_discord.channel_messages(channel)
    assert head["content"] == WORKING_TEXT
    assert custom_ids(head) == [f"stop:{RUN}:{channel}"]
    assert parse_custom_id(custom_ids(head)[0]) == ("stop", RUN, channel)
    answer = ("Rivers flow downhill. " * 30).strip()
    await stream(surface, answer)
    await surface.emit(finished(channel, answer.strip()))
    await surface.close()
    (head,) = fake_discord.channel_messages(channel)  # one message: the head became the answer
    assert head["content"] == answer.strip()
    assert custom_ids(head) == [f"feedback:{RUN}:up", f"feedback:{RUN}:down"]
    # 30 deltas arrived at once: coalesced into a handful of edits, not one per delta.
    assert 1 <= len(edits(fake_discord, channel)) <= 4
    assert fake_discord.requests_to("POST", rf"/channels/{channel}/typing")
    # No text the surface shows may ping anyone.
    for request in posts(fake_discord, channel) + edits(fake_discord, channel):
        if "content" in request.json:
            assert request.json["allowed_mentions"]["parse"] == []


async def test_a_long_answer_is_split_at_2000_with_fences_balanced(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    code = "\n".join(f"print({i})  # a line of code that takes some room" for i in range(120))
    answer = "Here is the script:\n\n```python\n" + code + "\n```\n\nThat's all.\n\n" + "x " * 900
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await stream(surface, answer, chunk=500)
    await surface.emit(finished(channel, answer))
    await surface.close()
    shown = [m["content"] for m in fake_discord.channel_messages(channel)]
    assert len(shown) >= 3
    assert all(0 < len(part) <= MESSAGE_LIMIT for part in shown)
    for part in shown:
        assert _open_fence(part.split("\n")) is None, part[-80:]
    assert shown[1].startswith("```python")  # the fence reopened with its language
    joined = "".join(shown)
    assert "print(119)" in joined and "That's all." in joined
    last = fake_discord.channel_messages(channel)[-1]
    assert custom_ids(last) == [f"feedback:{RUN}:up", f"feedback:{RUN}:down"]
    assert custom_ids(fake_discord.channel_messages(channel)[0]) == []  # Stop is gone


async def test_tool_calls_are_compact_embeds_and_long_output_is_a_file(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await surface.emit(
        ToolExecutionStart("call-1", "grep", {"pattern": "TODO", "path": "."}, "Search for TODO")
    )
    output = "\n".join(f"src/file{i}.py:{i}: TODO fix" for i in range(200))
    await surface.emit(
        ToolExecutionEnd(
            "call-1",
            "grep",
            ToolResultMessage(tool_call_id="call-1", tool_name="grep", content=[Text(text=output)]),
            1.25,
        )
    )
    await surface.emit(
        ToolExecutionStart("call-2", "read", {"path": "missing.txt"}, "Read missing.txt")
    )
    await surface.emit(
        ToolExecutionEnd(
            "call-2",
            "read",
            ToolResultMessage(
                tool_call_id="call-2",
                tool_name="read",
                content=[Text(text="no such file")],
                is_error=True,
            ),
            0.01,
        )
    )
    await stream(surface, "Found 200 TODOs.")
    await surface.emit(finished(channel, "Found 200 TODOs."))
    await surface.close()
    head, grep, read, answer = fake_discord.channel_messages(channel)
    assert head["content"] == "✅ Used 2 tools" and custom_ids(head) == []
    (grep_embed,) = grep["embeds"]
    assert grep_embed["title"] == "✅ Search for TODO"
    assert grep_embed["color"] == 0x2D9D78
    assert grep_embed["footer"]["text"] == "grep · 1.2s"
    assert len(grep_embed["description"]) < 1_000 and grep_embed["description"].startswith("```")
    assert '"pattern": "TODO"' in grep_embed["fields"][0]["value"]
    (attached,) = grep["attachments"]
    assert attached["filename"] == "grep-output.txt" and attached["data"] == output
    (read_embed,) = read["embeds"]
    assert read_embed["title"] == "❌ Read missing.txt" and read_embed["color"] == 0xD9534F
    assert "no such file" in read_embed["description"]
    assert answer["content"] == "Found 200 TODOs."
    assert custom_ids(answer) == [f"feedback:{RUN}:up", f"feedback:{RUN}:down"]


async def test_a_rate_limited_post_is_retried_without_duplicating_the_answer(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    fake_discord.rate_limit_next("POST", rf"/channels/{channel}/messages")
    fake_discord.rate_limit_next("PATCH", rf"/channels/{channel}/messages/\d+")
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await stream(surface, "one answer")
    await surface.emit(finished(channel, "one answer"))
    await surface.close()
    assert [m["content"] for m in fake_discord.channel_messages(channel)] == ["one answer"]
    assert len(posts(fake_discord, channel)) == 2  # the 429, then the post


async def test_notices_files_and_errors(ready_bot: commands.Bot, fake_discord: FakeDiscord) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    await surface.emit(Notice("Queued behind an earlier message.", audience=ADA))
    await surface.emit(Notice("Budget nearly spent.", "warning"))
    await surface.emit(FileOut("out/report.csv", "report.csv", "text/csv", b"a,b\n1,2\n"))
    await surface.emit(
        FileOut("out/big.bin", "big.bin", "application/octet-stream", b"0" * (MAX_UPLOAD_BYTES + 1))
    )
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await surface.emit(
        finished(
            channel,
            "",
            "error",
            error_text="The model is overloaded.\nTry again.",
            reference="ab12",
        )
    )
    await surface.close()
    addressed, warning, report, big, head, error = fake_discord.channel_messages(channel)
    assert addressed["content"] == f"<@{ADA.id}> ℹ️ Queued behind an earlier message."
    addressed_request = posts(fake_discord, channel)[0]
    assert addressed_request.json["allowed_mentions"]["users"] == [int(ADA.id)]
    assert warning["content"] == "⚠️ Budget nearly spent."
    assert report["attachments"][0]["filename"] == "report.csv"
    assert report["attachments"][0]["data"] == "a,b\n1,2\n"
    assert "too large" in big["content"] and "out/big.bin" in big["content"]
    assert big["attachments"] == []
    assert head["content"] == "❌ Failed" and custom_ids(head) == []
    assert error["content"] == "❌ The model is overloaded. Try again. (reference `ab12`)"


async def interaction_for(
    bot: commands.Bot, fake: FakeDiscord, channel: str
) -> tuple[discord.Interaction[Any], dict[str, Any]]:
    """A real discord.Interaction for a `/ask` the fake dispatched, deferred."""
    seen: asyncio.Queue[discord.Interaction[Any]] = asyncio.Queue()

    async def on_interaction(interaction: discord.Interaction[Any]) -> None:
        seen.put_nowait(interaction)

    bot.add_listener(on_interaction)
    payload = fake.slash_command("ask", {"prompt": "why?"}, channel_id=channel)
    await fake.dispatch("INTERACTION_CREATE", payload)
    interaction = await asyncio.wait_for(seen.get(), 15)
    await interaction.response.defer(thinking=True)
    return interaction, payload


async def test_the_ask_head_is_edited_through_the_token_then_by_bot_token_once_expired(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    interaction, payload = await interaction_for(ready_bot, fake_discord, channel)
    original = await interaction.original_response()
    clock = Clock()
    surface = surface_in(
        ready_bot, channel, interaction=interaction, head_id=original.id, clock=clock
    )
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    webhook = (
        rf"/webhooks/{fake_discord.application_id}/{re.escape(payload['token'])}/messages/@original"
    )
    (shown,) = fake_discord.requests_to("PATCH", webhook)
    assert shown.json["content"] == WORKING_TEXT
    assert custom_ids(shown.json) == [f"stop:{RUN}:{channel}"]
    await surface.emit(Notice("Only you can see this.", audience=ADA))
    (ephemeral,) = fake_discord.requests_to("POST", rf"/webhooks/\d+/{re.escape(payload['token'])}")
    assert ephemeral.json["flags"] & 64
    clock.now += TOKEN_LIFE_S + 1  # a long run: the token has lapsed
    await stream(surface, "the answer, at last")
    await surface.emit(finished(channel, "the answer, at last"))
    await surface.close()
    assert len(fake_discord.requests_to("PATCH", webhook)) == 1  # never used after expiry
    bot_posts = [r.json.get("content") for r in posts(fake_discord, channel)]
    assert "the answer, at last" in bot_posts
    final = fake_discord.channel_messages(channel)[-1]
    assert final["content"] == "the answer, at last"
    assert custom_ids(final) == [f"feedback:{RUN}:up", f"feedback:{RUN}:down"]


async def test_a_refused_token_falls_back_to_the_bot_token(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    interaction, payload = await interaction_for(ready_bot, fake_discord, channel)
    original = await interaction.original_response()
    surface = surface_in(ready_bot, channel, interaction=interaction, head_id=original.id)
    fake_discord.expire_interaction(payload["token"])
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await surface.emit(Notice("Queued.", audience=ADA))
    await stream(surface, "still answered")
    await surface.emit(finished(channel, "still answered"))
    await surface.close()
    thinking, head, queued = fake_discord.channel_messages(channel)
    assert thinking["id"] == str(original.id) and thinking["content"] == ""
    assert head["content"] == "still answered"  # posted, then edited, with the bot token
    assert custom_ids(head) == [f"feedback:{RUN}:up", f"feedback:{RUN}:down"]
    assert queued["content"] == f"<@{ADA.id}> ℹ️ Queued."


async def test_after_a_restart_the_stuck_head_is_closed_from_its_ref(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    ref = before.ref
    assert ref == {
        "platform": "discord",
        "channel_id": channel,
        "head_id": fake_discord.channel_messages(channel)[0]["id"],
    }
    surfaces = DiscordSurfaces(ready_bot)
    assert surfaces.for_ref(key(channel), {"platform": "slack"}) is None
    assert surfaces.for_ref(key(channel), {"platform": "discord", "channel_id": "x"}) is None
    after = surfaces.for_ref(key(channel), ref)
    assert after is not None
    await after.emit(
        finished(channel, "", "interrupted", error_text="Teammate restarted while answering.")
    )
    await after.close()
    head, note = fake_discord.channel_messages(channel)
    assert custom_ids(head) == [] and head["content"] == "⚠️ Interrupted"
    assert note["content"] == "⚠️ Teammate restarted while answering."


@pytest.mark.parametrize("outcome", ["aborted"])
async def test_a_stopped_run_keeps_what_it_said_and_loses_its_buttons(
    ready_bot: commands.Bot, fake_discord: FakeDiscord, outcome: str
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await stream(surface, "half an ans")
    await surface.emit(finished(channel, "", outcome, error_text="Stopped by Ada."))
    await surface.close()
    head, note = fake_discord.channel_messages(channel)
    assert head["content"] == "half an ans" and custom_ids(head) == []
    assert note["content"] == "⏹️ Stopped by Ada."


async def test_a_huge_answer_is_not_a_wall_of_messages_but_an_attached_file(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    answer = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(200))  # ~75,000 chars
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    await stream(surface, answer, chunk=5_000)
    await surface.emit(finished(channel, answer))
    await surface.close()
    # One message (the head) says so, the whole answer attached to it: one copy.
    (note,) = fake_discord.channel_messages(channel)
    assert note["content"] == attached_text(answer)
    (attached,) = note["attachments"]
    assert attached["filename"] == "answer.md" and attached["data"] == answer
    assert [c.split(":")[0] for c in custom_ids(note)] == ["feedback", "feedback"]
