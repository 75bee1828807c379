"""A Discord answer that called tools, its process killed while showing it, is shown once after
the restart, the tools counted right.

The real `TeammateBot`, runner and SQLite store against `DyingDiscord` (see
`test_recovery_parts`): the run calls tools (their embeds posted in the thread), then answers
with several messages; the process dies at a moment the test picks, and a new runner on the
same store recovers the run. What a person would notice is asserted on what the fake holds:
each part of the answer exactly once, in order, none lost, found however busy the thread is and
whatever tool embeds lie between what was stored and what was posted; and the head's summary
counting the tools the run used.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import discord
import pytest
from pydantic import BaseModel

from bots.platforms.discord.bot import DISCORD_RULES
from bots.platforms.discord.surface import MESSAGE_LIMIT, WORKING_TEXT
from bots.runner import ConversationRunner
from bots.surface.markdown_split import split_markdown
from core.models.scripted import Reply, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.base import Fence, RunRecord
from storage.sqlite import SqliteStore
from tests.bots.platforms.discord.test_recovery_parts import (
    Harness,
    When,
    crash_and_recover,
    custom_ids,
    dying_harness,
    long_answer,
    the_end,
)
from tests.fakes.discord_server import BOT_TOKEN, RecordedRequest
from tests.fakes.gate_tool import GateTool

BUSY = 60  # messages others post in the thread while the run works: more than a page


class LookupParams(BaseModel):
    query: str


class LookupTool(AgentTool[LookupParams]):
    name = "lookup"
    label = "Look up"
    description = "Look something up."
    parameters = LookupParams

    async def execute(self, call_id: str, params: LookupParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text(f"three results for {params.query}")


class RefusingStore(SqliteStore):
    """A real store whose writes of a run's surface ref fail while `refuse(ref)` says so (the
    database briefly unavailable): the surface goes on, the ref stored stays an older one."""

    refuse: Callable[[dict[str, Any]], bool] | None = None

    async def set_run_surface_ref(
        self, run_id: int, ref: dict[str, Any], *, fence: Fence | None = None
    ) -> RunRecord:
        if self.refuse is not None and self.refuse(ref):
            raise ConnectionError("the database is unavailable")
        return await super().set_run_surface_ref(run_id, ref, fence=fence)


@dataclass
class ToolHarness(Harness):
    store: RefusingStore
    gate: GateTool = field(default_factory=GateTool)

    def runner(self, surfaces: Any = None) -> ConversationRunner:
        return ConversationRunner(
            store=self.store,
            settings=self.settings,
            model_factory=lambda _model_id: self.model,
            toolset_factory=lambda _channel: [self.gate, LookupTool()],
            platform_rules=DISCORD_RULES,
            surfaces=surfaces,
        )


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[ToolHarness]:
    async with dying_harness(tmp_path, RefusingStore, ToolHarness) as made:
        yield made


def two_tools_then(h: ToolHarness) -> None:
    """The run's first replies: a call of the gate (held until the test opens it), then a
    lookup; no text before either, so the head stays a status and the answer follows the
    embeds. `crash_and_recover` adds the answer."""
    h.model.add(Reply(tool_calls=[call("gate")]))
    h.model.add(Reply(tool_calls=[call("lookup", {"query": "rivers"})]))


def is_tool_embed(message: dict[str, Any]) -> bool:
    """An embed the bot set (a tool call's), not a link's preview Discord added."""
    return any(e.get("type", "rich") == "rich" for e in message["embeds"])


def answer_messages(h: ToolHarness, thread: str, head_id: str) -> list[dict[str, Any]]:
    """The bot's messages in the thread showing answer text (not the head, not a tool's)."""
    return [
        m
        for m in h.fake.channel_messages(thread)
        if m["author"]["id"] == h.fake.bot_id and not is_tool_embed(m) and m["id"] != head_id
    ]


def assert_answer_once(shown: list[dict[str, Any]], answer: str) -> None:
    parts = split_markdown(answer, MESSAGE_LIMIT)
    assert len(parts) >= 3
    texts = [m["content"] for m in shown]
    assert texts == parts, "each part of the answer exactly once, in order, none lost"
    assert all(custom_ids(m) == [] for m in shown[:-1])
    assert [c.split(":")[0] for c in custom_ids(shown[-1])] == ["feedback", "feedback"]


def tool_embeds(h: ToolHarness, thread: str) -> list[dict[str, Any]]:
    return [m for m in h.fake.channel_messages(thread) if is_tool_embed(m)]


def posting_part(
    h: ToolHarness, thread: str, index: int
) -> Callable[[RecordedRequest], When | None]:
    """Kills the process once Discord has created the answer's part `index` (0-based), before
    the process learns its id: it is never stored."""

    def kill(r: RecordedRequest) -> When | None:
        posting = r.method == "POST" and r.path == f"/channels/{thread}/messages"
        body = r.json if isinstance(r.json, dict) else {}
        if not posting or not str(body.get("content", "")).startswith("Paragraph"):
            return None
        shown = [m for m in h.fake.channel_messages(thread) if m["content"].startswith("Paragraph")]
        return "after" if len(shown) == index else None

    return kill


async def test_killed_posting_the_last_part_in_a_busy_thread_after_tools_shows_it_once(
    harness: ToolHarness,
) -> None:
    """Two tool calls, then a three-message answer; while the first tool works, others post
    more than a page of messages in the thread. Killed as the last part was created, never
    stored. More than a page of chatter follows before the restart. Recovery reads on from what
    was stored, oldest first (a page from the thread's start or from its newest end holds none
    of the run's messages) and keeps that part; the head counts both tools."""
    h = harness
    answer = long_answer(12)
    parts = split_markdown(answer, MESSAGE_LIMIT)
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])  # a thread started from a message has the message's id
    two_tools_then(h)
    h.fake.kill_at = posting_part(h, thread, len(parts) - 1)

    async def ask() -> None:
        await h.fake.dispatch("MESSAGE_CREATE", asked)
        await asyncio.wait_for(h.gate.entered.wait(), 30)
        for i in range(BUSY):
            h.fake.message_payload(thread, f"chatter {i}")  # in the thread, never seen by the bot
        h.gate.opened.set()
        await h.fake.killed.wait()
        for i in range(BUSY):  # "is it down?": more than a page again before the restart
            h.fake.message_payload(thread, f"after {i}")

    await crash_and_recover(h, answer, ask)
    head = h.fake.channel_messages(thread)[0]
    assert_answer_once(answer_messages(h, thread, head["id"]), answer)
    assert len(tool_embeds(h, thread)) == 2, "each tool call's embed once"
    assert "Used 2 tools" in head["content"] and WORKING_TEXT not in head["content"]
    assert custom_ids(head) == [], "no Stop left on the head"


async def test_a_part_whose_link_discord_previewed_is_not_posted_again(
    harness: ToolHarness,
) -> None:
    """Every part of the answer links somewhere, and Discord previews each link as an embed on
    the part. Killed as the last part was created, never stored: recovery keeps that part
    (a link's preview does not make it a tool's embed), it is not posted a second time."""
    h = harness
    h.fake.unfurl_links = True
    answer = "\n\n".join(
        f"Paragraph {i}: see https://rivers.example/{i} " + " ".join(f"w{i}-{j}" for j in range(40))
        for i in range(18)
    )
    parts = split_markdown(answer, MESSAGE_LIMIT)
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])
    two_tools_then(h)
    h.gate.opened.set()
    h.fake.kill_at = posting_part(h, thread, len(parts) - 1)
    await crash_and_recover(h, answer, lambda: h.fake.dispatch("MESSAGE_CREATE", asked))
    head = h.fake.channel_messages(thread)[0]
    shown = answer_messages(h, thread, head["id"])
    assert all(m["embeds"] for m in shown), "(Discord previewed every part's link)"
    assert_answer_once(shown, answer)
    assert len(tool_embeds(h, thread)) == 2
    assert "Used 2 tools" in head["content"]


async def test_parts_posted_after_a_tool_embed_the_ref_never_saw_are_kept(
    harness: ToolHarness,
) -> None:
    """The database refused the surface's refs from the second tool call on (logged; the run
    went on), so the ref stored was the one before that call's embed; then the process died at
    the answer's end. Between what was stored and the answer's parts lies that embed: recovery
    reads past it and keeps every part, posting none again."""
    h = harness
    answer = long_answer(12)
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])
    two_tools_then(h)
    h.gate.opened.set()
    h.store.refuse = lambda ref: ref.get("tools", 0) >= 2
    h.fake.kill_at = the_end

    async def ask() -> None:
        await h.fake.dispatch("MESSAGE_CREATE", asked)
        await h.fake.killed.wait()
        h.store.refuse = None  # the database is back for the new process

    await crash_and_recover(h, answer, ask)
    head = h.fake.channel_messages(thread)[0]
    assert_answer_once(answer_messages(h, thread, head["id"]), answer)
    assert len(tool_embeds(h, thread)) == 2
    assert WORKING_TEXT not in head["content"] and custom_ids(head) == []


async def test_an_ask_that_used_one_tool_says_so_after_the_restart(harness: ToolHarness) -> None:
    """`/ask`, one tool call, a three-message answer in the thread; killed at the end. The
    head in the channel says where the answer is and counts the one tool (not "tools")."""
    h = harness
    answer = long_answer(12)
    h.gate.opened.set()
    h.model.add(Reply(tool_calls=[call("gate")]))
    h.fake.kill_at = the_end

    async def ask() -> None:
        await h.fake.wait_for(lambda: bool(h.fake.commands))  # synced at start-up
        slash = h.fake.slash_command(
            "ask", {"prompt": "tell me about rivers"}, channel_id=h.general
        )
        await h.fake.dispatch("INTERACTION_CREATE", slash)

    key = await crash_and_recover(h, answer, ask)
    thread = key.rsplit(":", 1)[-1]
    (head,) = h.fake.channel_messages(h.general)
    assert head["content"].endswith("· used 1 tool"), head["content"]
    assert f"<#{thread}>" in head["content"] and custom_ids(head) == []
    assert_answer_once(answer_messages(h, thread, head["id"]), answer)
    assert len(tool_embeds(h, thread)) == 1


async def test_history_pages_read_from_either_end_as_discord_answers(
    harness: ToolHarness,
) -> None:
    """The fake pages a channel as Discord does: `after` gives the oldest after the id,
    `before` (or nothing) the newest; either listed newest first (discord.py reorders)."""
    h = harness
    ids = [int(h.fake.message_payload(h.general, f"m{i}")["id"]) for i in range(120)]
    client = discord.Client(intents=discord.Intents.none())
    await client.login(BOT_TOKEN)
    try:
        channel = client.get_partial_messageable(int(h.general))
        after = discord.Object(id=ids[9])
        oldest = [m.id async for m in channel.history(limit=5, after=after, oldest_first=True)]
        newest = [m.id async for m in channel.history(limit=5)]
        paged = [m.id async for m in channel.history(limit=None, after=after, oldest_first=True)]
    finally:
        await client.close()
    assert oldest == ids[10:15]
    assert newest == ids[-1:-6:-1]
    assert paged == ids[10:], "paging on with `after` reaches the newest, each once"


async def test_killed_before_an_answer_without_tools_showed_it_goes_into_the_head(
    harness: ToolHarness,
) -> None:
    """No tool call; killed as the answer's first text was about to go into the "working"
    head. After the restart the head shows the answer, with the feedback buttons: nothing is
    posted beside it, and it claims no tool."""
    h = harness
    answer = "Rivers flow downhill, pulled by gravity."
    asked = h.fake.message_payload(h.general, "tell me about rivers", mention_bot=True)
    thread = str(asked["id"])

    def at_the_first_text(r: RecordedRequest) -> When | None:
        body = r.json if isinstance(r.json, dict) else {}
        editing = r.method == "PATCH" and r.path.startswith(f"/channels/{thread}/messages/")
        return "before" if editing and body.get("content") not in (None, WORKING_TEXT) else None

    h.fake.kill_at = at_the_first_text
    await crash_and_recover(h, answer, lambda: h.fake.dispatch("MESSAGE_CREATE", asked))
    (head,) = h.fake.channel_messages(thread)
    assert head["content"] == answer
    assert [c.split(":")[0] for c in custom_ids(head)] == ["feedback", "feedback"]
