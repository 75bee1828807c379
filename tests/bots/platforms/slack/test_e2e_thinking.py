"""A Slack thread on the default model, whose replies carry signed thinking, keeps answering
after the channel's memory changed or the thread was compacted.

The real bolt app and slack_sdk against FakeSlack, the real runner on SQLite, and the real
Anthropic adapter against the fake Messages API, which refuses replayed thinking whose prefix
changed exactly as the API does (a 400, forever, unless the request asks to drop it).
"""

from __future__ import annotations

from pathlib import Path

from core.models.catalog import anthropic_model_spec
from core.models.scripted import ScriptedModel
from core.tools import AnyTool
from tests.bots.platforms.slack.e2e_harness import BOB, EchoTool, message_event, running, texts
from tests.bots.thinking_e2e import (
    CONTEXT_OPEN,
    MODEL_ID,
    answer,
    api_settings,
    assert_appended,
    assert_never_refused,
    bare,
    fake_messages_api,
    guards,
    last_user_text,
    message_requests,
    replays_thinking,
    tool_call,
)
from tests.fakes.anthropic_server import TextOut, ThinkingOut, sse
from tests.fakes.slack_server import FakeSlack


class DocsSearchTool(EchoTool):
    """Named as an MCP server's tool is (`server__tool`): one the server adds to its list."""

    name = "docs__search"
    label = "Search the docs"
    description = "Searches the team's documentation."


UNUSED = ScriptedModel([])  # the harness's scripted model: these tests use the real adapter


async def test_a_thread_answers_after_the_model_remembered_a_note(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    async with fake_messages_api() as fake:
        fake.add(
            tool_call("remember", {"note": "We deploy on Tuesdays."}, call_id="t1", signature="s1"),
            answer("Noted: you deploy on Tuesdays.", "s2"),
            answer("On Tuesdays.", "s3"),
        )
        async with running(
            fake_slack,
            tmp_path,
            UNUSED,
            real_model=MODEL_ID,
            channel_tools=True,
            **api_settings(fake),
        ) as app:
            asked = message_event(fake_slack, "remember that we deploy on Tuesdays")
            await app.event(asked)
            await app.settle()
            follow_up = message_event(
                fake_slack,
                "on which day do we deploy?",
                thread_ts=asked["ts"],
                mention=False,
                kind="message",
                user=BOB,
            )
            await app.event(follow_up)
            await app.settle()

    shown = texts(app.replies("C1", asked["ts"]))
    assert "Noted: you deploy on Tuesdays." in shown
    assert "On Tuesdays." in shown
    assert "refused" not in shown
    assert_never_refused(fake)
    remembered, after_tool, asked_again = message_requests(fake)
    # The note reached the second question as a context note appended to the thread; every
    # earlier message went again unchanged, so nothing needed the guard.
    assert guards(fake) == [False, False, False]
    assert_appended(after_tool, asked_again)
    assert CONTEXT_OPEN in last_user_text(asked_again)
    assert "We deploy on Tuesdays." in last_user_text(asked_again)
    assert remembered.body["system"] == asked_again.body["system"]
    assert all(replays_thinking(asked_again, s) for s in ("s1", "s2"))
    assert fake.dropped_thinking == 0


async def test_a_thread_answers_after_it_was_compacted(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    window = anthropic_model_spec(MODEL_ID).info.context_window
    # Compaction once the context passes 3,000 tokens, keeping the last answer verbatim (its
    # long reasoning makes it more than 60 tokens; the newest question alone is fewer).
    compaction = {"reserve_tokens": window - 3_000, "keep_recent_tokens": 60}
    long_reasoning = "Comparing the two build logs line by line. " * 12
    async with fake_messages_api() as fake:
        fake.add(
            answer("The build broke on the compiler bump.", "s1"),
            # A large context by the API's count: the next question compacts first.
            sse(
                ThinkingOut(long_reasoning, "s2"),
                TextOut("Pin the compiler to 14.2."),
                input_tokens=5_000,
            ),
            answer("## Goal\nFix the build.\n## Decisions\nPin the compiler.", "s-summary"),
            answer("Yes: pinned to 14.2, the build is green.", "s3"),
        )
        async with running(
            fake_slack,
            tmp_path,
            UNUSED,
            real_model=MODEL_ID,
            compaction=compaction,
            **api_settings(fake),
        ) as app:
            asked = message_event(fake_slack, "why is the build red?")
            await app.event(asked)
            await app.settle()
            for text in ("what should we do?", "is it fixed now?"):
                follow_up = message_event(
                    fake_slack, text, thread_ts=asked["ts"], mention=False, kind="message"
                )
                await app.event(follow_up)
                await app.settle()
            conversation = await app.store.get_conversation(
                f"slack:{fake_slack.team_id}:C1:{asked['ts']}"
            )
            assert conversation is not None
            loaded = await app.store.load(conversation.id)

    shown = texts(app.replies("C1", asked["ts"]))
    assert "Yes: pinned to 14.2, the build is green." in shown
    assert "refused" not in shown
    assert_never_refused(fake)
    assert loaded.compaction is not None and "Pin the compiler" in loaded.compaction.summary
    first, second, summary, third = message_requests(fake)
    # The summary request replays no thinking (one transcript message under its own prompt):
    # nothing to guard, and it was accepted.
    assert not replays_thinking(summary, "s1") and not replays_thinking(summary, "s2")
    assert summary.body["system"] != first.body["system"]
    # After the compaction the older turns are a summary: the kept answer's reasoning lost its
    # prefix, so that request (and only it) asked for stale thinking to be dropped.
    assert guards(fake) == [False, False, False, True]
    assert_appended(first, second)
    assert replays_thinking(third, "s2") and not replays_thinking(third, "s1")
    assert "Fix the build." in third.body["messages"][0]["content"][0]["text"]
    assert fake.dropped_thinking == 1


async def test_a_thread_answers_after_an_mcp_servers_tool_list_changed(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    # The toolset factory's answer changes between the two questions, as it does when an MCP
    # server announces `tools/list_changed` (the runner asks for the channel's tools each run).
    toolset: list[AnyTool] = [EchoTool()]
    async with fake_messages_api() as fake:
        fake.add(
            tool_call("echo", {"text": "ping"}, call_id="t1", signature="s1"),
            answer("The echo said ping.", "s2"),
            answer("Yes, I can search the docs now.", "s3"),
        )
        async with running(
            fake_slack,
            tmp_path,
            UNUSED,
            real_model=MODEL_ID,
            tools=lambda: list(toolset),
            **api_settings(fake),
        ) as app:
            asked = message_event(fake_slack, "echo ping please")
            await app.event(asked)
            await app.settle()
            toolset.append(DocsSearchTool())
            follow_up = message_event(
                fake_slack,
                "can you search the docs?",
                thread_ts=asked["ts"],
                mention=False,
                kind="message",
            )
            await app.event(follow_up)
            await app.settle()

    shown = texts(app.replies("C1", asked["ts"]))
    assert "Yes, I can search the docs now." in shown
    assert "refused" not in shown
    assert_never_refused(fake)
    echoed, after_tool, asked_again = message_requests(fake)
    # The tool list is part of every message's prefix: the earlier reasoning lost it, so the
    # request after the change (and only it) asked for stale thinking to be dropped.
    assert guards(fake) == [False, False, True]
    assert [t["name"] for t in echoed.body["tools"]] == ["echo"]
    assert [t["name"] for t in asked_again.body["tools"]] == ["echo", "docs__search"]
    earlier = after_tool.body["messages"]
    assert bare(asked_again.body["messages"][: len(earlier)]) == bare(earlier)
    assert replays_thinking(asked_again, "s1")
    assert fake.dropped_thinking > 0
