"""What a restarted `DiscordSurface` finds of an earlier process's messages when the ref stored
lags behind what Discord shows (the process died between posting a message and storing its id,
or the database refused the later refs): against the fake Discord with the real discord.py,
asserted on what the fake holds and received. Each part of the answer is shown once, in order,
where it already was; nothing the bot said earlier in the channel is taken over."""

from __future__ import annotations

from typing import Any

import pytest
from discord.ext import commands

from bots.platforms.discord.surface import (
    MESSAGE_LIMIT,
    OVERFLOW_FILE,
    WORKING_TEXT,
    DiscordSurface,
    attached_text,
)
from bots.platforms.discord.surface_parts import WRITING_TEXT
from bots.platforms.discord.surface_recovery import LOOKUP_LIMIT, recovered_from_ref, ref_int
from bots.surface.contract import Notice, RunStarted
from bots.surface.markdown_split import split_markdown
from core.events import MessageEnd, MessageStart, MessageUpdate, ToolExecutionStart
from core.messages import AssistantMessage, Text
from core.models.base import TextDelta
from tests.bots.platforms.discord.test_surface import (
    ADA,
    RUN,
    custom_ids,
    finished,
    general,
    interaction_for,
    key,
    stream,
    surface_in,
)
from tests.bots.platforms.discord.test_surface_recovery import paragraphs, recovered
from tests.fakes.discord_limits import ChannelRateLimits
from tests.fakes.discord_server import FakeDiscord

CHATTER = 60  # others' messages in the channel while a tool works: more than one read


class Streaming:
    """One reply streamed into `surface` in steps, as a model writes it."""

    def __init__(self, surface: DiscordSurface) -> None:
        self.surface = surface
        self.partial = AssistantMessage()
        self.text = ""

    async def start(self) -> None:
        await self.surface.emit(MessageStart(message=self.partial))

    async def write(self, text: str, chunk: int = 500) -> None:
        """Streams `text` on; returns once what it shows has reached Discord."""
        for start in range(0, len(text), chunk):
            delta = TextDelta(partial=self.partial, index=0, delta=text[start : start + chunk])
            await self.surface.emit(MessageUpdate(message=self.partial, delta=delta))
        self.text += text
        await self.surface._throttle.drain()

    async def end(self) -> None:
        message = AssistantMessage(content=[Text(text=self.text)])
        await self.surface.emit(MessageEnd(message=message))
        await self.surface._throttle.drain()


def bots_text_messages(fake: FakeDiscord, channel: str) -> list[dict[str, Any]]:
    """The bot's messages in `channel` that show text (not a tool call's embed)."""
    return [
        m
        for m in fake.channel_messages(channel)
        if m["author"]["id"] == fake.bot_id and not m["embeds"]
    ]


def assert_parts_once(shown: list[dict[str, Any]], answer: str) -> None:
    parts = split_markdown(answer, MESSAGE_LIMIT)
    assert len(parts) >= 2
    assert [m["content"] for m in shown] == parts, "each part once, in order, none lost"
    assert all(custom_ids(m) == [] for m in shown[:-1])
    assert [c.split(":")[0] for c in custom_ids(shown[-1])] == ["feedback", "feedback"]


async def test_an_ask_whose_first_part_had_moved_to_the_thread_shows_each_part_once(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """`/ask`: the head in the channel showed the answer's first part; when a second followed,
    that text moved to the conversation's channel and the head went back to "working", but
    the ref stored still named the head as the part. After the restart the moved copy is the
    first part (not posted a second time), the head says where the answer is."""
    channel = general(fake_discord)
    guild = next(iter(fake_discord.guilds))
    thread = fake_discord.add_channel(guild, name="answers")["id"]
    interaction, _ = await interaction_for(ready_bot, fake_discord, channel)
    original = await interaction.original_response()
    before = surface_in(
        ready_bot,
        thread,
        conversation_channel_id=thread,
        interaction=interaction,
        head_id=original.id,
        head_channel=ready_bot.get_partial_messageable(int(channel)),
    )
    answer = paragraphs("ask", 10)
    first, _ = split_markdown(answer, MESSAGE_LIMIT)
    await before.emit(RunStarted(key(thread), RUN, ADA))
    streaming = Streaming(before)
    await streaming.start()
    await streaming.write(first)
    (head,) = fake_discord.channel_messages(channel)
    assert head["content"] == first  # the whole answer so far: it shows in the head
    stored = dict(before.ref)
    assert stored["parts"] == [head["id"]] and stored["head_text"] is True
    await streaming.write(answer[len(first) :])
    await streaming.end()
    await before.close()  # killed: the ref naming the moved part was never stored
    assert fake_discord.channel_messages(channel)[0]["content"] == WORKING_TEXT
    assert [m["content"] for m in fake_discord.channel_messages(thread)] == split_markdown(
        answer, MESSAGE_LIMIT
    )
    after = recovered(ready_bot, thread, stored)
    await after.emit(finished(thread, answer))
    await after.close()
    assert_parts_once(fake_discord.channel_messages(thread), answer)
    (head,) = fake_discord.channel_messages(channel)
    assert head["content"] == f"✅ Answered in <#{thread}>" and custom_ids(head) == []


async def test_parts_posted_after_a_busy_stretch_and_an_unstored_embed_are_found(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """More than one read of others' messages, then a tool call; the ref stored last was the
    one after that call's embed (the database refused the later ones). A second call's embed
    and the answer's parts followed. Recovery reads on from what the ref knew (not from the
    head, whose next page holds only chatter), once and bounded, past the embed it never
    knew, and keeps the parts already posted."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    for i in range(CHATTER):
        fake_discord.message_payload(channel, f"chatter {i}")
    await before.emit(ToolExecutionStart("call-1", "grep", {"pattern": "x"}, "Search for x"))
    stored = dict(before.ref)  # as the feed stored it after the call's event; then refused
    assert "parts" not in stored and stored["tools"] == 1
    await before.emit(ToolExecutionStart("call-2", "grep", {"pattern": "y"}, "Search for y"))
    answer = paragraphs("lake", 10)
    await stream(before, answer, chunk=700)
    await before._throttle.drain()
    await before.close()
    head, *answered = bots_text_messages(fake_discord, channel)
    assert [m["content"] for m in answered] == split_markdown(answer, MESSAGE_LIMIT)
    read_before = len(fake_discord.requests_to("GET", rf"/channels/{channel}/messages"))
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    head, *answered = bots_text_messages(fake_discord, channel)
    assert_parts_once(answered, answer)
    assert custom_ids(head) == [] and WORKING_TEXT not in head["content"]
    assert len([m for m in fake_discord.channel_messages(channel) if m["embeds"]]) == 2
    (read,) = fake_discord.requests_to("GET", rf"/channels/{channel}/messages")[read_before:]
    assert int(read.query["limit"]) <= LOOKUP_LIMIT


async def test_a_part_posted_after_the_head_is_kept_as_it_is(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """The head showed the first part (the ref names it, and nothing after it); the second
    part was posted whole, never stored, then a notice. Recovery keeps the part without
    rewriting it (its only edit is the feedback buttons) and leaves the notice as it was."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    answer = paragraphs("pond", 10)
    first, second = split_markdown(answer, MESSAGE_LIMIT)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    streaming = Streaming(before)
    await streaming.start()
    await streaming.write(first)
    stored = dict(before.ref)
    (head,) = fake_discord.channel_messages(channel)
    assert stored["parts"] == [head["id"]] and "after" not in stored
    await streaming.write(answer[len(first) :], chunk=len(answer))
    await streaming.end()
    await before.emit(Notice("Your export is ready.", audience=ADA))
    await before.close()
    head, part, notice = fake_discord.channel_messages(channel)
    assert part["content"] == second
    edited_before = len(fake_discord.requests_to("PATCH", rf"/channels/{channel}/messages/\d+"))
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    *shown, notice_after = fake_discord.channel_messages(channel)
    assert_parts_once(shown, answer)
    assert notice_after == notice
    edits = fake_discord.requests_to("PATCH", rf"/channels/{channel}/messages/\d+")
    rewritten = [r for r in edits[edited_before:] if "content" in (r.json or {})]
    assert [r.path.rsplit("/", 1)[-1] for r in rewritten] == [head["id"]], (
        "only the head, whose text a restart cannot know, is written again"
    )


async def test_a_run_stored_before_its_head_showed_takes_over_none_of_the_bots_messages(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """The bot answered the same question earlier in the channel. A second run's process died
    before its head showed (its ref names no message); after the restart its answer is posted
    anew, the earlier answer left as it was."""
    channel = general(fake_discord)
    answer = paragraphs("sea", 10)
    earlier = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await earlier.emit(RunStarted(key(channel), RUN, ADA))
    await stream(earlier, answer, chunk=700)
    await earlier.emit(finished(channel, answer))
    await earlier.close()
    shown_earlier = fake_discord.channel_messages(channel)
    stored = surface_in(ready_bot, channel, conversation_channel_id=channel).ref
    assert "head_id" not in stored
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    shown = fake_discord.channel_messages(channel)
    assert shown[: len(shown_earlier)] == shown_earlier, "the earlier answer is untouched"
    assert_parts_once(shown[len(shown_earlier) :], answer)


async def test_a_long_answers_one_message_posted_after_a_tool_is_found_and_gets_the_file(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """After a tool call, an answer too long for messages showed as one "being written"
    message, never stored. Recovery finds that message and attaches the answer to it: one
    message, one file, no second note; a notice between is left as it was."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    await before.emit(ToolExecutionStart("call-1", "grep", {"pattern": "x"}, "Search for x"))
    stored = dict(before.ref)
    await before.emit(Notice("Still looking.", audience=ADA))
    answer = paragraphs("ocean", 60)
    await stream(before, answer, chunk=len(answer))
    await before._throttle.drain()
    await before.close()
    head, notice, note = bots_text_messages(fake_discord, channel)
    assert note["content"] == WRITING_TEXT and not note["attachments"]
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    head, notice_after, note = bots_text_messages(fake_discord, channel)
    assert notice_after == notice, "the notice is not taken for the answer's message"
    (attached,) = note["attachments"]
    assert attached["filename"] == OVERFLOW_FILE and attached["data"] == answer
    assert note["content"] == attached_text(answer)
    assert [c.split(":")[0] for c in custom_ids(note)] == ["feedback", "feedback"]
    assert head["content"] == "✅ Used 1 tool"


async def test_an_answer_killed_before_it_showed_goes_into_the_working_head(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """Killed while the head still said "working" (the ref names only the head): after the
    restart the head shows the answer's first part, the second follows it, nothing else."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    stored = dict(before.ref)
    await before.close()
    (head,) = fake_discord.channel_messages(channel)
    assert head["content"] == WORKING_TEXT and "parts" not in stored
    answer = paragraphs("brook", 10)
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    shown = fake_discord.channel_messages(channel)
    assert shown[0]["id"] == head["id"]
    assert_parts_once(shown, answer)


@pytest.mark.parametrize("known", ["named by the ref", "found after it"])
async def test_a_recovered_answer_is_rewritten_within_the_channels_limit(
    ready_bot: commands.Bot, fake_discord: FakeDiscord, known: str
) -> None:
    """Killed partway through an answer of four parts: three shown, their ids stored, or the
    first stored and the second found half-written. The restart writes the parts it does not
    know are right again, posts the rest, then the head's and the last part's buttons: more
    writes than the channel takes in five seconds, sends and edits together. They wait their
    turn in the channel's one lane: Discord refuses none (429)."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    answer = paragraphs("delta", 16)
    parts = split_markdown(answer, MESSAGE_LIMIT)
    assert len(parts) == 4
    await before.emit(RunStarted(key(channel), RUN, ADA))
    streaming = Streaming(before)
    await streaming.start()
    if known == "named by the ref":
        await streaming.write("\n\n".join(parts[:3]), chunk=700)
        stored = dict(before.ref)
        assert len(stored["parts"]) == 3
    else:
        await streaming.write(parts[0])
        stored = dict(before.ref)
        await streaming.write("\n\n" + parts[1][:600])
        assert len(fake_discord.channel_messages(channel)) == 2
    await before.close()
    fake_discord.rate_limits = ChannelRateLimits()  # the restart comes a window later
    fake_discord.rate_limited.clear()
    after = recovered(ready_bot, channel, stored)
    await after.emit(finished(channel, answer))
    await after.close()
    assert_parts_once(fake_discord.channel_messages(channel), answer)
    assert [f"{r.method} {r.path}" for r in fake_discord.rate_limited] == []


def test_a_ref_is_read_for_what_it_can_mean() -> None:
    """Snowflakes are unsigned 64-bit (up to 20 digits); a tool count is a count."""
    assert ref_int("18446744073709551615") == 18446744073709551615
    assert ref_int("1" * 21) is None and ref_int("-5") is None and ref_int(5) is None
    assert recovered_from_ref({"tools": 1_000_000}).tools == 1_000_000
    assert recovered_from_ref({"tools": 1_000_001}).tools == 0
    assert recovered_from_ref({"tools": -1}).tools == 0
    assert recovered_from_ref({"tools": "3"}).tools == 0
    assert recovered_from_ref({"after": "42", "parts": ["7", "x", 8]}).after == 42
    assert recovered_from_ref({"after": "42", "parts": ["7", "x", 8]}).parts == (7,)
