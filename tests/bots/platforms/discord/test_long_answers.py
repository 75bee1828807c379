"""A long answer on Discord, end to end (issue 28, "A channel"): the real bot, runner and store
against the fake Discord, which enforces Discord's limits (2,000 characters a message; 5
message writes per 5 s per channel, a 429 with `retry_after` past them). Asserted on what the
fake holds: the answer's text in the thread exactly once (as messages or as a file, never both)
and whole, no note left saying what was still to come, the message in the channel saying where
the answer is, and the posting kept within the channel's limit."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.settings import DiscordSettings
from core.models.scripted import Reply, call
from tests.bots.platforms.discord.test_bot_e2e import Teammate, started_teammate
from tests.fakes.discord_server import FakeDiscord

# Notes an answer shows while it is still being written; none may be left at the end.
UNFINISHED = ("when it is complete", "being written", "will be attached", "Working…")


def long_answer(paragraphs: int = 15) -> str:
    """About 16,000 characters in sections of about 1,000 that each name themselves (`¶7:`),
    so no two fit in one message."""
    return "\n\n".join(
        f"¶{i}: " + " ".join(f"river{i}-{j}" for j in range(104)) for i in range(paragraphs)
    )


def markers(answer: str) -> list[str]:
    return re.findall(r"¶\d+:", answer)


def file_text(attachment: dict[str, Any]) -> str:
    return str(attachment["data"]).encode("latin-1").decode()  # the fake keeps bytes so


def shown_text(messages: list[dict[str, Any]]) -> list[str]:
    """Every piece of text the messages show: contents and attached files."""
    texts = [m["content"] for m in messages]
    texts += [file_text(a) for m in messages for a in m["attachments"]]
    return texts


def assert_answer_once(messages: list[dict[str, Any]], answer: str) -> None:
    """Each paragraph of `answer` shown exactly once, whole; no note of what is to come."""
    texts = shown_text(messages)
    joined = "\n".join(texts)
    for marker in markers(answer):
        assert joined.count(marker) == 1, f"{marker} shown {joined.count(marker)} times"
    files = [a for m in messages for a in m["attachments"]]
    if files:  # as a file: the whole answer, and no message repeats any of it
        (file,) = files
        assert file["filename"] == "answer.md" and file_text(file) == answer
    else:  # as messages: in order, together the whole answer
        parts = [m["content"] for m in messages if "¶" in m["content"]]
        assert "\n\n".join(parts) == answer
    for text in [m["content"] for m in messages]:
        assert not any(note in text for note in UNFINISHED), f"left showing {text!r}"


@pytest.fixture
async def teammate(fake_discord: FakeDiscord, tmp_path: Path) -> AsyncIterator[Teammate]:
    async with started_teammate(fake_discord, tmp_path, DiscordSettings()) as harness:
        yield harness


async def answered(teammate: Teammate, thread: str, requests: int = 1) -> None:
    """Once the model was asked `requests` times in the thread's conversation and its run
    is over."""
    await teammate.fake.wait_for(lambda: len(teammate.model.requests) >= requests)
    await teammate.runner.wait(f"discord:{next(iter(teammate.fake.guilds))}:{thread}")


async def test_a_long_answer_to_a_mention_reaches_the_thread_once(teammate: Teammate) -> None:
    answer = long_answer()
    assert 15_000 < len(answer) < 17_000
    teammate.model.add(Reply(text=answer, chunk_size=400))
    asked = await teammate.mention("tell me everything about rivers")
    thread = asked["id"]
    await teammate.fake.wait_for(lambda: thread in teammate.fake.channels)
    await answered(teammate, thread)
    assert_answer_once(teammate.fake.channel_messages(thread), answer)
    # The channel keeps the person's message, the thread started from it; nothing of ours.
    (mention,) = teammate.fake.channel_messages(teammate.general)
    assert mention["id"] == thread and mention["thread"]["id"] == thread


async def test_an_ask_answered_after_a_tool_says_in_the_channel_where_the_answer_is(
    teammate: Teammate,
) -> None:
    """The reply before the tool call is a preamble ("Saving it."): the message in the
    channel must not end as that fragment, but say the answer is in the thread."""
    teammate.gate.release.set()
    teammate.model.add(
        Reply(text="Saving it.", tool_calls=[call("gate")]),
        Reply(text="Saved: the notes are in `notes.md`, three sections."),
    )
    command = teammate.fake.slash_command(
        "ask", {"prompt": "save my notes"}, channel_id=teammate.general
    )
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    await teammate.fake.wait_for(
        lambda: any(m["type"] == 20 for m in teammate.fake.channel_messages(teammate.general))
    )
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    thread = head["id"]
    await answered(teammate, thread, requests=2)
    (head,) = teammate.fake.channel_messages(teammate.general)
    assert f"<#{thread}>" in head["content"], head["content"]
    assert "Saving it." not in head["content"]
    contents = [m["content"] for m in teammate.fake.channel_messages(thread)]
    assert sum("Saved: the notes" in c for c in contents) == 1
    assert sum("Saving it." in c for c in contents) == 1  # the preamble, once, in the thread


async def test_a_long_ask_says_in_the_channel_where_it_is_and_reaches_the_thread_once(
    teammate: Teammate,
) -> None:
    answer = long_answer()
    teammate.model.add(Reply(text=answer, chunk_size=400))
    command = teammate.fake.slash_command(
        "ask", {"prompt": "tell me everything about rivers"}, channel_id=teammate.general
    )
    await teammate.fake.dispatch("INTERACTION_CREATE", command)
    await teammate.fake.wait_for(
        lambda: any(m["type"] == 20 for m in teammate.fake.channel_messages(teammate.general))
    )
    head = next(m for m in teammate.fake.channel_messages(teammate.general) if m["type"] == 20)
    thread = head["id"]
    await teammate.fake.wait_for(lambda: thread in teammate.fake.channels)
    await answered(teammate, thread)
    (head,) = teammate.fake.channel_messages(teammate.general)
    assert f"<#{thread}>" in head["content"], head["content"]
    assert_answer_once([head, *teammate.fake.channel_messages(thread)], answer)


async def test_a_long_answer_is_posted_within_the_channels_rate_limit(teammate: Teammate) -> None:
    """Streamed over a few seconds, as a model writes: Discord's 5 writes per 5 s per channel
    are kept (the fake answers 429 past them), and the answer still arrives whole."""
    answer = long_answer()
    teammate.model.add(Reply(text=answer, chunk_size=200, chunk_delay_s=0.03))
    asked = await teammate.mention("tell me everything about rivers, slowly")
    thread = asked["id"]
    await teammate.fake.wait_for(lambda: thread in teammate.fake.channels)
    await answered(teammate, thread)
    refused = [f"{r.method} {r.path}" for r in teammate.fake.rate_limited]
    assert refused == [], "past the channel's limit: Discord answered 429"
    assert_answer_once(teammate.fake.channel_messages(thread), answer)
