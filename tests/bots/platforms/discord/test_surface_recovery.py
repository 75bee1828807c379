"""A `DiscordSurface` made from an earlier surface's stored `ref` (a restart's report) against
the fake Discord with the real discord.py: it shows the answer where the earlier one did,
each part once. The ref "stored" is the one the surface asked to have stored (its checkpoint)
or had after its last event, as the runner's feed stores it."""

from __future__ import annotations

from typing import Any

import pytest
from discord.ext import commands

from bots.platforms.discord.surface import (
    MESSAGE_LIMIT,
    OVERFLOW_FILE,
    WRITING_TEXT,
    DiscordSurface,
    DiscordSurfaces,
    attached_text,
)
from bots.surface.contract import RunStarted
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
    key,
    stream,
    surface_in,
)
from tests.fakes.discord_server import FakeDiscord


def paragraphs(word: str, count: int) -> str:
    return "\n\n".join(
        f"{word} {i}: " + " ".join(f"{word}{i}-{j}" for j in range(40)) for i in range(count)
    )


def recovered(bot: commands.Bot, channel: str, ref: dict[str, Any]) -> DiscordSurface:
    surface = DiscordSurfaces(bot).for_ref(key(channel), ref)
    assert isinstance(surface, DiscordSurface)
    return surface


def checkpoints(surface: DiscordSurface) -> list[dict[str, Any]]:
    """The refs `surface` asks to have stored, as it asks."""
    stored: list[dict[str, Any]] = []

    async def store() -> None:
        stored.append(dict(surface.ref))

    surface.set_checkpoint(store)
    return stored


async def test_a_recovered_answer_of_fewer_parts_deletes_the_stale_ones(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    await stream(before, paragraphs("old", 14), chunk=700)  # three messages, then killed
    await before._throttle.drain()
    assert len(fake_discord.channel_messages(channel)) == 3
    answer = paragraphs("new", 11)  # what history holds: two messages' worth
    after = recovered(ready_bot, channel, before.ref)
    await after.emit(finished(channel, answer))
    await after.close()
    shown = fake_discord.channel_messages(channel)
    assert [m["content"] for m in shown] == split_markdown(answer, MESSAGE_LIMIT)
    assert len(shown) == 2, "the third, stale part is gone, not left showing old text"
    assert fake_discord.requests_to("DELETE", rf"/channels/{channel}/messages/\d+")
    assert [c.split(":")[0] for c in custom_ids(shown[-1])] == ["feedback", "feedback"]
    assert custom_ids(shown[0]) == []  # no Stop left on the head


async def test_killed_as_a_tool_call_showed_the_text_before_it_stays_and_the_answer_follows(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """The embed was posted, the ref stored just before it (the feed had not stored the
    next one yet): the answer after the call must not be recovered into the text before it."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    stored = checkpoints(before)
    await before.emit(RunStarted(key(channel), RUN, ADA))
    await stream(before, "Let me look that up.")
    await before._throttle.drain()
    stored.append(dict(before.ref))  # as the feed stores it after an event
    await before.emit(ToolExecutionStart("call-1", "grep", {"pattern": "x"}, "Search for x"))
    head, embed = fake_discord.channel_messages(channel)
    assert head["content"] == "Let me look that up." and embed["embeds"]
    after = recovered(ready_bot, channel, stored[-1])
    await after.emit(finished(channel, "Found it in three places."))
    await after.close()
    head, embed, answer = fake_discord.channel_messages(channel)
    assert head["content"] == "Let me look that up." and custom_ids(head) == []
    assert embed["embeds"]
    assert answer["content"] == "Found it in three places."
    assert [c.split(":")[0] for c in custom_ids(answer)] == ["feedback", "feedback"]


async def test_each_part_is_stored_as_it_is_posted(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """A part's id is asked to be stored right after it is posted, before anything else is."""
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel, conversation_channel_id=channel)
    stored = checkpoints(surface)
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    answer = paragraphs("river", 12)
    await stream(surface, answer, chunk=700)
    await surface.emit(finished(channel, answer))
    await surface.close()
    shown = [m["id"] for m in fake_discord.channel_messages(channel)]
    assert len(shown) == 3
    assert [ref.get("parts") for ref in stored] == [shown[:2], shown]  # head first, then each
    assert stored[-1]["head_text"] is True


async def test_an_answer_whose_deltas_were_dropped_is_shown_whole(
    ready_bot: commands.Bot, fake_discord: FakeDiscord
) -> None:
    """A slow surface's feed drops text deltas (bounded); the message's end has it all."""
    channel = general(fake_discord)
    surface = surface_in(ready_bot, channel)
    await surface.emit(RunStarted(key(channel), RUN, ADA))
    partial = AssistantMessage()
    await surface.emit(MessageStart(message=partial))
    for piece in ("Rivers ", "downhill."):  # "flow " was dropped
        delta = TextDelta(partial=partial, index=0, delta=piece)
        await surface.emit(MessageUpdate(message=partial, delta=delta))
    whole = "Rivers flow downhill."
    await surface.emit(MessageEnd(message=AssistantMessage(content=[Text(text=whole)])))
    await surface.emit(finished(channel, whole))
    await surface.close()
    (head,) = fake_discord.channel_messages(channel)
    assert head["content"] == whole


@pytest.mark.parametrize("stored_when", ["while in parts", "before the file", "after the file"])
async def test_a_huge_answer_recovered_attaches_its_file_once(
    ready_bot: commands.Bot, fake_discord: FakeDiscord, stored_when: str
) -> None:
    """Killed while the answer still showed as parts, or once its one message had the file
    (before or after that ref was stored): one message holds the whole answer as a file, once,
    and no part is left beside it."""
    channel = general(fake_discord)
    before = surface_in(ready_bot, channel, conversation_channel_id=channel)
    stored = checkpoints(before)
    answer = paragraphs("sea", 60)  # over four messages' worth
    await before.emit(RunStarted(key(channel), RUN, ADA))
    partial = AssistantMessage()
    await before.emit(MessageStart(message=partial))
    for start in range(0, len(answer), 1_500):
        delta = TextDelta(partial=partial, index=0, delta=answer[start : start + 1_500])
        await before.emit(MessageUpdate(message=partial, delta=delta))
        if start == 4_500:  # four parts shown
            await before._throttle.drain()
            in_parts = dict(before.ref)
    await before.emit(MessageEnd(message=AssistantMessage(content=[Text(text=answer)])))
    streamed = dict(before.ref)  # as the feed stores it after the last event
    await before.emit(finished(channel, answer))
    await before.close()
    assert len(in_parts["parts"]) == 4 and "attached" not in streamed
    files = [m for m in fake_discord.channel_messages(channel) if m["attachments"]]
    assert len(files) == 1
    ref = {"while in parts": in_parts, "before the file": streamed, "after the file": stored[-1]}
    assert stored[-1].get("attached") is True
    requests_before = len(fake_discord.requests)
    after = recovered(ready_bot, channel, ref[stored_when])
    await after.emit(finished(channel, answer))
    await after.close()
    recovering = fake_discord.requests[requests_before:]
    if stored_when == "after the file":  # it says so: the file stays, the note never regresses
        assert not [r for r in recovering if r.files], "the file is not uploaded again"
        assert not [r for r in recovering if WRITING_TEXT in str(r.json)]
    (note,) = fake_discord.channel_messages(channel)  # the head, holding the whole answer
    (attached,) = note["attachments"]
    assert attached["filename"] == OVERFLOW_FILE and attached["data"] == answer
    assert note["content"] == attached_text(answer)
