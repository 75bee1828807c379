"""The conversation runner, through ScriptedModel, the real SQLite store and a recording surface."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bots.incoming import Attachment, BackfillMessage
from bots.runner import DELIVERED_TEXT, QUEUED_TEXT, ConversationRunner
from bots.settings import BudgetSettings, CompactionSettings, Settings
from bots.workspaces import workspace_name
from core.history import repair_history
from core.messages import (
    AssistantMessage,
    Author,
    Image,
    Text,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.models.base import ModelInfo, ModelRequest, Prices
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AnyTool
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import (
    ADA,
    BOB,
    CHANNEL,
    KEY,
    SleepTool,
    history,
    incoming,
    make_runner,
    roles,
)
from tests.fakes.recording_surface import RecordingSurface, RecordingSurfaces
from tests.fakes.sample_images import plain


async def test_answers_persists_and_records_the_run(store: SqliteStore, tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="Hello Ada!")])
    runner = make_runner(store, tmp_path, model)
    surface = RecordingSurface()
    assert await runner.submit(incoming("hi"), surface) == "started"
    await runner.wait(KEY)

    [finished] = surface.finished()
    assert finished.outcome == "done" and finished.final_text == "Hello Ada!"
    assert finished.usage.cost > 0
    assert surface.types()[0] == "run_started" and surface.closed == 1
    stored = await history(store)
    assert roles(stored) == ["user", "assistant"]
    user = stored[0]
    assert isinstance(user, UserMessage) and user.author == ADA
    assert user.text().startswith("[Ada (U1) · ") and user.text().endswith("\nhi")
    conversation = await store.get_conversation(KEY)
    assert conversation is not None and conversation.channel_key == CHANNEL
    spent = await store.usage_since(0, channel_key=CHANNEL)
    assert spent.cost == pytest.approx(finished.usage.cost)


async def test_a_repeated_delivery_is_answered_once_even_after_a_restart(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="once")])
    runner = make_runner(store, tmp_path, model)
    event = incoming("hi", delivery="Ev-retried")
    assert await runner.submit(event, RecordingSurface()) == "started"
    assert await runner.submit(event, RecordingSurface()) == "duplicate"
    await runner.wait(KEY)
    restarted = make_runner(store, tmp_path, model)
    assert await restarted.submit(event, RecordingSurface()) == "duplicate"
    assert len(model.requests) == 1
    assert roles(await history(store)) == ["user", "assistant"]


async def test_a_message_arriving_mid_run_is_steered_in_after_the_tool_batch(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = SleepTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("sleep", {"seconds": 0.3})]), Reply(text="done, and noted Bob")]
    )
    runner = make_runner(store, tmp_path, model, tools=[tool])
    surface = RecordingSurface()
    await runner.submit(incoming("please sleep"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    bob_surface = RecordingSurface("bob")
    assert await runner.submit(incoming("also say hi", author=BOB), bob_surface) == "steered"
    await runner.wait(KEY)

    assert len(model.requests) == 2
    second = model.requests[1].messages
    assert roles(second) == ["user", "assistant", "tool_result", "user"]
    result, steered = second[2], second[3]
    assert isinstance(result, ToolResultMessage) and not result.is_error
    assert isinstance(steered, UserMessage) and steered.author == BOB
    # Stored in delivery order (Bob after the batch's result): replay is what the model saw.
    stored = await history(store)
    assert roles(stored) == ["user", "assistant", "tool_result", "user", "assistant"]
    assert repair_history(stored) == stored
    # One run answered both; it was shown where it started. Bob's own surface was told that
    # his message was queued, then taken in, and was closed.
    assert [f.outcome for f in surface.finished()] == ["done"]
    assert [n.text for n in bob_surface.notices()] == [QUEUED_TEXT, DELIVERED_TEXT]
    assert all(n.audience == BOB for n in bob_surface.notices())
    assert bob_surface.types() == ["notice", "notice"] and bob_surface.closed == 1


async def test_several_queued_messages_arrive_together_in_order(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = SleepTool()
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 0.3})]), Reply(text="ok")])
    runner = make_runner(store, tmp_path, model, tools=[tool])
    surface = RecordingSurface()
    await runner.submit(incoming("start"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    for text in ("one", "two", "three"):
        assert await runner.submit(incoming(text, author=BOB), RecordingSurface()) == "steered"
    await runner.wait(KEY)
    tail = model.requests[1].messages[-3:]
    assert [m.text().split("\n")[-1] for m in tail if isinstance(m, UserMessage)] == [
        "one",
        "two",
        "three",
    ]
    assert len(model.requests) == 2


async def test_a_message_right_as_a_run_starts_is_delivered_exactly_once(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="first", latency_s=0.05), Reply(text="second")])
    runner = make_runner(store, tmp_path, model)
    surface = RecordingSurface()
    await asyncio.gather(
        runner.submit(incoming("a"), surface), runner.submit(incoming("b"), RecordingSurface())
    )
    await runner.wait(KEY)
    sent = [m.text()[-1] for r in model.requests for m in r.messages if isinstance(m, UserMessage)]
    # Every request sees each message at most once, and both are answered.
    for request in model.requests:
        texts = [m.text() for m in request.messages if isinstance(m, UserMessage)]
        assert len(texts) == len(set(texts))
    assert "b" in sent
    stored = await history(store)
    assert roles(stored).count("user") == 2
    assert roles(stored)[-1] == "assistant"


async def test_stop_mid_tool_cancels_promptly_and_the_next_message_is_answered(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = SleepTool()
    model = ScriptedModel(
        [Reply(tool_calls=[call("sleep", {"seconds": 30})]), Reply(text="fresh answer")]
    )
    runner = make_runner(store, tmp_path, model, tools=[tool])
    surface = RecordingSurface()
    await runner.submit(incoming("sleep long"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    started = time.monotonic()
    assert runner.stop(KEY, by=BOB) == "stopped"
    await runner.wait(KEY)
    assert time.monotonic() - started < 1.0
    assert tool.cancelled == 1
    [finished] = surface.finished()
    assert finished.outcome == "aborted"
    assert finished.error_text == "Stopped by Bob."
    stored = await history(store)
    assert roles(stored) == ["user", "assistant", "tool_result", "assistant"]
    assert isinstance(stored[2], ToolResultMessage) and stored[2].is_error
    assert isinstance(stored[3], AssistantMessage) and stored[3].stop_reason == "aborted"
    assert runner.stop(KEY) == "idle"

    await runner.submit(incoming("try again"), RecordingSurface())
    await runner.wait(KEY)
    assert roles(model.requests[1].messages) == ["user", "assistant", "tool_result", "user"]


async def test_two_hundred_conversations_run_in_parallel(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel(default=Reply(text="parallel answer", latency_s=0.3), record=False)
    runner = make_runner(store, tmp_path, model)
    surfaces = [RecordingSurface(str(i)) for i in range(200)]
    started = time.monotonic()
    results = await asyncio.gather(
        *(
            runner.submit(incoming(f"q{i}", key=f"terminal:c{i}", channel=f"terminal:c{i}"), s)
            for i, s in enumerate(surfaces)
        )
    )
    assert results == ["started"] * 200
    await runner.wait_all()
    elapsed = time.monotonic() - started
    assert all([f.outcome for f in s.finished()] == ["done"] for s in surfaces)
    assert elapsed < 6.0, f"200 conversations of 0.3 s each took {elapsed:.1f} s"
    for i in (0, 99, 199):
        assert roles(await history(store, f"terminal:c{i}")) == ["user", "assistant"]


async def test_several_authors_are_attributed(store: SqliteStore, tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="hi Ada"), Reply(text="hi Bob")])
    runner = make_runner(store, tmp_path, model)
    await runner.submit(incoming("I am Ada", author=ADA), RecordingSurface())
    await runner.wait(KEY)
    await runner.submit(incoming("I am Bob", author=BOB), RecordingSurface())
    await runner.wait(KEY)
    sent = model.requests[1].messages
    users = [m for m in sent if isinstance(m, UserMessage)]
    assert [u.author for u in users] == [ADA, BOB]
    assert users[0].text().startswith("[Ada (U1)")
    assert users[1].text().startswith("[Bob (U2)")
    # The volatile facts live in the user message; the system prompt stays byte-identical.
    assert model.requests[0].system_prompt == model.requests[1].system_prompt
    assert "Ada" not in model.requests[0].system_prompt
    assert "2026" not in model.requests[0].system_prompt.split("Formatting:")[1]


async def test_backfill_enters_the_conversation_attributed(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="caught up")])
    runner = make_runner(store, tmp_path, model)
    earlier = (
        BackfillMessage(author=BOB, text="the build is red", timestamp=1_795_999_000.0),
        BackfillMessage(
            author=Author(id="B1", name="Teammate"),
            text="I looked earlier",
            timestamp=1_795_999_100.0,
            from_assistant=True,
        ),
    )
    await runner.submit(incoming("@teammate why?", backfill=earlier), RecordingSurface())
    await runner.wait(KEY)
    first, second = model.requests[0].messages[:2]
    assert isinstance(first, UserMessage)
    assert "[Bob (U2) · " in first.text() and "the build is red" in first.text()
    assert "[you (Teammate) (B1) · " in first.text()
    assert isinstance(second, UserMessage) and second.author == ADA
    # Backfill happens only for a conversation's first message.
    await runner.submit(incoming("again", backfill=earlier), RecordingSurface())
    await runner.wait(KEY)
    assert roles(await history(store)).count("user") == 3


async def test_images_are_sent_and_other_files_land_in_the_workspace(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="nice picture")])
    runner = make_runner(store, tmp_path, model)
    files = (
        Attachment(name="pic.png", mime_type="image/png", data=plain((4, 4))),
        Attachment(name="../../notes.txt", mime_type="text/plain", data=b"remember this"),
    )
    await runner.submit(incoming("look", attachments=files), RecordingSurface())
    await runner.wait(KEY)
    [sent] = model.requests[0].messages
    assert isinstance(sent, UserMessage) and isinstance(sent.content, list)
    text, image = sent.content
    assert isinstance(text, Text) and isinstance(image, Image)
    assert image.mime_type == "image/png"
    assert "attachments/notes.txt" in text.text
    saved = tmp_path / "workspaces" / workspace_name(CHANNEL) / "attachments" / "notes.txt"
    assert saved.read_bytes() == b"remember this"


async def test_threads_of_a_channel_share_a_workspace_and_dms_do_not(
    store: SqliteStore, tmp_path: Path
) -> None:
    tool = SleepTool()

    def sleeper(_request: ModelRequest) -> Reply:
        done = any(isinstance(m, ToolResultMessage) for m in _request.messages)
        return Reply(text="ok") if done else Reply(tool_calls=[call("sleep", {"seconds": 0})])

    model = ScriptedModel(default=sleeper)
    runner = make_runner(store, tmp_path, model, tools=[tool])
    for key, channel in (
        (f"{CHANNEL}:1.1", CHANNEL),
        (f"{CHANNEL}:2.2", CHANNEL),
        ("slack:T1:D9:3.3", "slack:T1:D9"),
    ):
        await runner.submit(incoming("go", key=key, channel=channel), RecordingSurface())
        await runner.wait(key)
    first, second, dm = tool.workspaces
    assert first == second != dm
    assert first.is_dir() and dm.is_dir()
    assert first.parent == tmp_path / "workspaces"


async def test_budget_refusal_names_the_limit_and_calls_no_model(
    store: SqliteStore, tmp_path: Path
) -> None:
    expensive = Usage(input=100_000, output=10_000)  # $0.45 at the scripted prices
    model = ScriptedModel([Reply(text="pricey", usage=expensive), Reply(text="never")])
    runner = make_runner(store, tmp_path, model, budgets=BudgetSettings(channel_usd_per_day=0.40))
    await runner.submit(incoming("first"), RecordingSurface())
    await runner.wait(KEY)
    surface = RecordingSurface()
    await runner.submit(incoming("second", key=f"{CHANNEL}:other"), surface)
    await runner.wait(f"{CHANNEL}:other")
    assert len(model.requests) == 1
    [finished] = surface.finished()
    assert finished.outcome == "error" and finished.error_text is not None
    assert "this channel has used $0.45 of $0.40 today" in finished.error_text
    assert "budgets.channel_usd_per_day" in finished.error_text
    assert surface.notices() == []  # said once, as the run's outcome


async def test_model_errors_are_shown_short_and_useful(store: SqliteStore, tmp_path: Path) -> None:
    overloaded = AssistantMessage(
        stop_reason="error", error_kind="overloaded", error_message="Overloaded (529) x3"
    )
    runner = make_runner(store, tmp_path, ScriptedModel([overloaded]))
    surface = RecordingSurface()
    await runner.submit(incoming("hi"), surface)
    await runner.wait(KEY)
    [finished] = surface.finished()
    assert finished.outcome == "error"
    assert finished.error_text == "The model is overloaded right now. Try again in a minute."


async def test_an_unexpected_failure_shows_a_reference_and_logs_the_traceback(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_tools(_channel: str) -> Sequence[AnyTool]:
        raise RuntimeError("toolset exploded")

    runner = ConversationRunner(
        store=store,
        settings=Settings(data_dir=tmp_path),
        model_factory=lambda _id: ScriptedModel([Reply(text="x")]),
        toolset_factory=broken_tools,
        platform_rules="",
    )
    surface = RecordingSurface()
    with caplog.at_level(logging.ERROR):
        await runner.submit(incoming("hi"), surface)
        await runner.wait(KEY)
    [finished] = surface.finished()
    assert finished.outcome == "error" and finished.reference is not None
    assert finished.error_text is not None and finished.reference in finished.error_text
    assert "toolset exploded" not in finished.error_text
    record = next(r for r in caplog.records if finished.reference in r.getMessage())
    assert record.exc_info is not None
    assert await store.running_runs() == []  # the run was closed, not left "running"
    # The conversation is not wedged: the next message starts a run.
    assert not runner.is_running(KEY)


def _long(text: str, tokens: int) -> str:
    return (text + " ") * (tokens * 4 // (len(text) + 1))


async def _fill(store: SqliteStore, turns: int, tokens_each: int) -> None:
    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    for turn in range(turns):
        await store.append_message(
            conversation.id,
            UserMessage(content=_long(f"question {turn}", tokens_each), author=ADA),
        )
        await store.append_message(
            conversation.id, AssistantMessage(content=[Text(text=_long(f"answer {turn}", 50))])
        )


SMALL_WINDOW = ModelInfo(
    id="small",
    provider="scripted",
    context_window=4_000,
    max_output_tokens=500,
    prices=Prices(input=1.0, output=1.0),
)


def _is_summary_request(request: ModelRequest) -> bool:
    return request.system_prompt.startswith("You summarise")


async def test_compaction_keeps_recent_turns_verbatim_and_is_stored_once(
    store: SqliteStore, tmp_path: Path
) -> None:
    await _fill(store, turns=12, tokens_each=400)  # ~5,400 tokens > 4,000 - 500

    def reply(request: ModelRequest) -> Reply:
        if _is_summary_request(request):
            return Reply(text="## Goal\nAnswer Ada's questions.\n## Decisions\nnone")
        return Reply(text="answered", usage=Usage(input=1_500, output=10))

    model = ScriptedModel(default=reply, info=SMALL_WINDOW)
    compaction = CompactionSettings(reserve_tokens=500, keep_recent_tokens=1_000)
    runner = make_runner(store, tmp_path, model, compaction=compaction)
    await runner.submit(incoming("question 12"), RecordingSurface())
    await runner.wait(KEY)

    summary_requests = [r for r in model.requests if _is_summary_request(r)]
    # Older turns exceed this small window, so they are summarised in chunks, oldest first,
    # each merged into the summary so far.
    assert len(summary_requests) >= 2
    assert "question 0" in summary_requests[0].messages[0].text()  # type: ignore[union-attr]
    assert "PREVIOUS SUMMARY:" in summary_requests[1].messages[0].text()  # type: ignore[union-attr]
    answer_request = model.requests[-1]
    first = answer_request.messages[0]
    assert isinstance(first, UserMessage)
    assert "<conversation-summary>" in first.text() and "Answer Ada's questions." in first.text()
    kept = [m.text() for m in answer_request.messages[1:]]
    assert kept[-1].endswith("question 12")
    assert any(text.startswith("question 11") for text in kept)  # recent turns, verbatim
    assert not any(text.startswith("question 0 ") for text in kept)
    conversation = await store.get_conversation(KEY)
    assert conversation is not None
    loaded = await store.load(conversation.id)
    assert loaded.compaction is not None and loaded.compaction.summary.startswith("## Goal")

    # The next message does not summarise again: the stored compaction stands.
    await runner.submit(incoming("question 13"), RecordingSurface())
    await runner.wait(KEY)
    assert len([r for r in model.requests if _is_summary_request(r)]) == len(summary_requests)
    assert "<conversation-summary>" in model.requests[-1].messages[0].text()  # type: ignore[union-attr]


async def test_context_overflow_compacts_and_retries_once(
    store: SqliteStore, tmp_path: Path
) -> None:
    await _fill(store, turns=6, tokens_each=100)
    overflow = AssistantMessage(
        stop_reason="error", error_kind="context_overflow", error_message="prompt is too long"
    )
    model = ScriptedModel(
        [overflow, Reply(text="## Goal\nsummary"), Reply(text="fits now")], info=SMALL_WINDOW
    )
    compaction = CompactionSettings(reserve_tokens=500, keep_recent_tokens=200)
    runner = make_runner(store, tmp_path, model, compaction=compaction)
    surface = RecordingSurface()
    await runner.submit(incoming("one more"), surface)
    await runner.wait(KEY)
    assert [f.outcome for f in surface.finished()] == ["done"]
    assert surface.finished()[0].final_text == "fits now"
    assert _is_summary_request(model.requests[1])
    assert "<conversation-summary>" in model.requests[2].messages[0].text()  # type: ignore[union-attr]


CRASH_CHILD = Path(__file__).with_name("crash_child.py")


@pytest.mark.skipif(sys.platform != "linux", reason="uses SIGKILL and /proc semantics")
async def test_crash_mid_run_is_repaired_reported_and_the_next_message_answered(
    store: SqliteStore, tmp_path: Path
) -> None:
    db = tmp_path / "teammate.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CRASH_CHILD),
        str(db),
        str(tmp_path),
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line.strip() == b"TOOL-RUNNING"
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()

    model = ScriptedModel([Reply(text="answered after the crash")])
    surfaces = RecordingSurfaces()
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()], surfaces=surfaces)
    [recovered] = await runner.recover()
    assert recovered.outcome == "interrupted"
    [(key, ref, surface)] = surfaces.made
    assert key == KEY and ref == {"surface": "recording", "name": "child"}
    await runner.wait_all()
    [finished] = surface.finished()
    assert finished.outcome == "interrupted" and finished.run_id == recovered.id
    assert finished.error_text is not None and "interrupted" in finished.error_text
    assert await store.running_runs() == []
    stored = await history(store)
    assert roles(stored) == ["user", "assistant", "tool_result"]
    assert isinstance(stored[2], ToolResultMessage) and "interrupted" in stored[2].text()
    assert repair_history(stored) == stored  # durable: nothing left to repair

    after = RecordingSurface()
    assert await runner.submit(incoming("are you back?"), after) == "started"
    await runner.wait(KEY)
    assert after.finished()[0].final_text == "answered after the crash"
    assert roles(model.requests[0].messages) == ["user", "assistant", "tool_result", "user"]
    assert await runner.recover() == []


async def test_a_stop_drops_the_messages_queued_behind_the_run_and_names_them(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 30})])])
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    surface = RecordingSurface()
    await runner.submit(incoming("sleep"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    bob = RecordingSurface("bob")
    await runner.submit(incoming("and then this", author=BOB), bob)
    assert runner.stop(KEY) == "stopped"
    await runner.wait(KEY)
    [notice] = surface.notices()
    assert "will not be answered: Bob: “and then this”" in notice.text
    assert notice.audience is None  # everyone in the conversation
    assert "won't answer Bob: “and then this”" in bob.notices()[-1].text and bob.closed == 1
    assert len(model.requests) == 1
    assert "and then this" not in " ".join(m.text() for m in await history(store))
    conversation = await store.get_conversation(KEY)
    assert conversation is not None and await store.pending(conversation.id) == []


async def test_a_stop_for_one_run_leaves_the_queued_messages_to_a_follow_up(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [Reply(tool_calls=[call("sleep", {"seconds": 30})])], default=Reply(text="follow-up")
    )
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    surface = RecordingSurface()
    await runner.submit(incoming("sleep"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    run_id = runner.current_run(KEY)
    assert run_id is not None
    assert runner.stop(KEY, run_id + 1000, by=BOB) == "stale"  # an old Stop button
    assert not surface.finished()
    # A message is steered into the run, but the loop delivers it only after the tool batch.
    bob = RecordingSurface("bob")
    assert await runner.submit(incoming("and then this", author=BOB), bob) == "steered"
    assert runner.stop(KEY, run_id, by=ADA) == "stopped"
    await runner.wait(KEY)
    assert [f.outcome for f in surface.finished()] == ["aborted"]
    # Bob's message starts its own run, shown on his surface.
    assert [f.outcome for f in bob.finished()] == ["done"]
    assert bob.types()[:2] == ["notice", "run_started"]
    assert bob.finished()[0].final_text == "follow-up"
    assert runner.stop(KEY, run_id) == "stale"


async def test_recovery_leaves_alone_runs_of_another_live_process(
    store: SqliteStore, tmp_path: Path
) -> None:
    from bots import recovery

    conversation = await store.get_or_create_conversation(KEY, channel_key=CHANNEL)
    parent = os.getppid()
    alive_owner = {
        "host": recovery.OWNER["host"],
        "pid": parent,
        "start": recovery.process_start(parent),
    }
    dead_owner = {**alive_owner, "pid": 2**22 + 7}  # above Linux's pid_max: never alive
    live = await store.start_run(conversation.id, owner=alive_owner)
    dead = await store.start_run(conversation.id, owner=dead_owner)
    reused = await store.start_run(conversation.id, owner={**alive_owner, "start": "1"})
    unknown = await store.start_run(conversation.id)  # from before owners were recorded
    runner = make_runner(store, tmp_path, ScriptedModel())
    recovered = await runner.recover()
    assert sorted(r.id for r in recovered) == sorted([dead.id, reused.id, unknown.id])
    assert [r.id for r in await store.running_runs()] == [live.id]


async def test_allow_lists_refuse_others_clearly_and_store_nothing(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(text="hello Ada"), Reply(text="hello again")])
    runner = make_runner(
        store, tmp_path, model, allowed_users=["U1"], allowed_channels=["slack:T1:C1", "terminal"]
    )
    bob_surface = RecordingSurface()
    assert await runner.submit(incoming("hi", author=BOB), bob_surface) == "refused"
    assert "not enabled for you" in bob_surface.notices()[0].text
    elsewhere = RecordingSurface()
    other = incoming("hi", key="slack:T1:C2:1.1", channel="slack:T1:C2")
    assert await runner.submit(other, elsewhere) == "refused"
    assert "not enabled in this channel" in elsewhere.notices()[0].text
    assert await store.get_conversation(KEY) is None
    assert await runner.submit(incoming("hi"), RecordingSurface()) == "started"
    terminal = incoming("hi", key="terminal:x", channel="terminal:x")
    assert await runner.submit(terminal, RecordingSurface()) == "started"
    await runner.wait_all()
    assert len(model.requests) == 2  # only the allowed ones reached the model
