"""The Slack surface fed by the real runner (SQLite store, ScriptedModel), shown on the fake
Slack: a run with tools, a stopped run, and an interrupted run reported after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack.blocks import GREEN
from bots.platforms.slack.surface import (
    DONE_REACTION,
    INTERRUPTED_REACTION,
    STOPPED_REACTION,
    SlackFeatures,
    SlackSurface,
    SlackSurfaces,
    SurfaceOptions,
)
from bots.recovery import INTERRUPTED_TEXT
from core.models.scripted import Reply, ScriptedModel, call
from storage.sqlite import SqliteStore
from tests.bots.platforms.slack.surface_script import (
    context_texts,
    has_feedback,
    has_stop,
    markdown_of,
    started,
    tool_start,
)
from tests.bots.runner_helpers import ADA, CHANNEL, KEY, SleepTool, incoming, make_runner
from tests.fakes.slack_server import FakeSlack

SLACK_CHANNEL = "C1"
FAST = SurfaceOptions(update_interval_s=0.02, activity_delay_s=3600)


def surface_for(
    client: AsyncWebClient, fake: FakeSlack, *, streaming: bool
) -> tuple[SlackSurface, str]:
    question = fake.seed_message(SLACK_CHANNEL, "<@UBOT> question", user=ADA.id)
    surface = SlackSurface(
        client,
        team_id="T1",
        channel=SLACK_CHANNEL,
        thread_ts=question["ts"],
        message_ts=question["ts"],
        user_id=ADA.id,
        features=SlackFeatures(streaming=streaming),
        options=FAST,
    )
    return surface, question["ts"]


async def test_a_run_with_a_tool_call_ends_as_one_threaded_answer(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    model = ScriptedModel()
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    for index, streaming in enumerate((False, True)):
        fake_slack.streaming_error = None if streaming else "unknown_method"
        model.add(
            Reply(text="Let me wait.", tool_calls=[call("sleep", {"seconds": 0})]),
            Reply(text="Done waiting: **all good**."),
        )
        surface, thread_ts = surface_for(slack_client, fake_slack, streaming=streaming)
        key = f"{KEY}{index}"
        await runner.submit(incoming("wait please", key=key), surface)
        await runner.wait(key)

        replies = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)
        shown = "\n".join(markdown_of(m) for m in replies)
        assert shown.count("Done waiting: **all good**.") == 1
        assert not any(has_stop(m) for m in replies)
        [attachment] = [a for m in replies for a in m.get("attachments", [])]
        assert attachment["color"] == GREEN
        assert attachment["title"] == "Sleep 0.0"  # the label the loop gives (AgentTool.summarize)
        [answer] = [m for m in replies if "all good" in markdown_of(m)]
        assert has_feedback(answer)
        assert fake_slack.reactions(SLACK_CHANNEL, thread_ts) == [DONE_REACTION]
    await runner.close()


async def test_a_stopped_run_shows_it_was_stopped(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    model = ScriptedModel([Reply(text="Sleeping.", tool_calls=[call("sleep", {"seconds": 60})])])
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    surface, thread_ts = surface_for(slack_client, fake_slack, streaming=False)
    await runner.submit(incoming("sleep a minute"), surface)
    await fake_slack.wait_for(
        lambda f: any(has_stop(m) for m in f.bot_replies(SLACK_CHANNEL, thread_ts))
    )
    assert runner.stop(KEY, by=ADA) == "stopped"
    await runner.wait(KEY)
    [message] = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)
    assert not has_stop(message)
    assert any(text.startswith("⏹️") for text in context_texts(message))
    assert fake_slack.reactions(SLACK_CHANNEL, thread_ts) == [STOPPED_REACTION]
    await runner.close()


async def _crashed_run(
    store: SqliteStore,
    fake_slack: FakeSlack,
    client: AsyncWebClient,
    *,
    post_progress: bool,
    recorded: bool = True,
) -> tuple[str, dict[str, Any]]:
    """A run whose process died mid-answer, with its ref as the feed stored it (`recorded`
    False: it died after posting the in-progress message, before storing where it was)."""
    surface, thread_ts = surface_for(client, fake_slack, streaming=False)
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    run = await store.start_run(
        conversation.id, user_id=ADA.id, model="m", surface_ref=surface.ref, owner={}
    )
    await surface.emit(started(run_id=run.id))
    if post_progress:
        await surface.emit(tool_start("t1", "grep", "Search", pattern="x"))
        await fake_slack.wait_for(lambda f: len(f.bot_replies(SLACK_CHANNEL, thread_ts)) == 1)
    ref = surface.ref
    if post_progress and recorded:  # as the feed stores it once the post has answered
        ref["progress_ts"] = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)[0]["ts"]
        await store.set_run_surface_ref(run.id, ref)
    return thread_ts, ref


async def test_an_interrupted_run_is_announced_in_its_thread_exactly_once(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    thread_ts, ref = await _crashed_run(store, fake_slack, slack_client, post_progress=True)
    posts_before = len(fake_slack.calls_to("chat.postMessage"))
    runner = make_runner(store, tmp_path, ScriptedModel(), surfaces=SlackSurfaces(slack_client))  # type: ignore[arg-type]
    [recovered] = await runner.recover()
    await runner.wait(KEY)
    assert recovered.outcome == "interrupted"
    [message] = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)
    assert message["ts"] == ref["progress_ts"]  # the in-progress message says it, no new post
    assert len(fake_slack.calls_to("chat.postMessage")) == posts_before
    assert not has_stop(message)
    assert any(INTERRUPTED_TEXT in text for text in context_texts(message))
    assert message["attachments"]  # the tool calls it had stay
    assert fake_slack.reactions(SLACK_CHANNEL, thread_ts) == [INTERRUPTED_REACTION]  # ⚠️
    assert await runner.recover() == []  # announced once: the run is closed
    await runner.close()


async def test_an_interrupted_run_that_showed_nothing_posts_once(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    thread_ts, ref = await _crashed_run(store, fake_slack, slack_client, post_progress=False)
    assert ref["progress_ts"] is None
    runner = make_runner(store, tmp_path, ScriptedModel(), surfaces=SlackSurfaces(slack_client))  # type: ignore[arg-type]
    await runner.recover()
    await runner.wait(KEY)
    [message] = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)
    assert any(INTERRUPTED_TEXT in text for text in context_texts(message))
    assert fake_slack.reactions(SLACK_CHANNEL, thread_ts) == [INTERRUPTED_REACTION]  # ⚠️
    assert SlackSurfaces(slack_client).for_ref(KEY, {"platform": "terminal"}) is None
    await runner.close()


async def test_an_in_progress_message_posted_but_not_recorded_is_found_at_recovery(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    thread_ts, ref = await _crashed_run(
        store, fake_slack, slack_client, post_progress=True, recorded=False
    )
    assert ref["progress_ts"] is None
    runner = make_runner(store, tmp_path, ScriptedModel(), surfaces=SlackSurfaces(slack_client))  # type: ignore[arg-type]
    await runner.recover()
    await runner.wait(KEY)
    [message] = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)  # no second message
    assert not has_stop(message)
    assert any(INTERRUPTED_TEXT in text for text in context_texts(message))
    await runner.close()


async def test_a_slow_slack_loses_no_text_when_the_feed_skips_deltas(
    store: SqliteStore, tmp_path: Path, fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    answer = " ".join(f"word{n}" for n in range(3_000))
    model = ScriptedModel([Reply(text=answer, chunk_size=3)])
    runner = make_runner(store, tmp_path, model)
    fake_slack.streaming_error = "unknown_method"
    fake_slack.delay("chat.postMessage", 0.3)  # the feed queues up, then skips text deltas
    surface, thread_ts = surface_for(slack_client, fake_slack, streaming=False)
    await runner.submit(incoming("talk a lot"), surface)
    await runner.wait(KEY)
    replies = fake_slack.bot_replies(SLACK_CHANNEL, thread_ts)
    assert " ".join(markdown_of(m) for m in replies).split() == answer.split()
    assert [has_feedback(m) for m in replies] == [False] * (len(replies) - 1) + [True]
    await runner.close()
