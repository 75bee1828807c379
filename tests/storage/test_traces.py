"""Run traces, the console's lists and feedback reviews on both backends."""

from __future__ import annotations

import pytest

from core.messages import AssistantMessage, Text, UserMessage
from storage.base import ConversationFilter, ConversationStore, TraceEvent
from storage.trace_records import MAX_TRACE_DATA_BYTES


async def a_run(store: ConversationStore, key: str, user: str = "U1") -> tuple[int, int]:
    channel = key.rsplit(":", 1)[0]
    conversation = await store.get_or_create_conversation(key, channel_key=channel)
    run = await store.start_run(conversation.id, user_id=user, channel_key=channel, model="m")
    return conversation.id, run.id


async def test_trace_events_come_back_by_run_in_the_order_recorded(
    store: ConversationStore,
) -> None:
    _, first = await a_run(store, "slack:T1:C1:1.0")
    _, second = await a_run(store, "slack:T1:C1:2.0")
    await store.append_trace_events(
        [
            TraceEvent(
                first, "model_call", 10.0, 812.5, {"input": 12, "stop_reason": "tool_use"}, 1
            ),
            TraceEvent(second, "answer", 11.0, 900.0, {}, 1),
            TraceEvent(first, "tool_call", 12.0, 40.0, {"label": "Read a", "error": None}, 2),
        ]
    )
    found = await store.run_traces([first])
    assert [(e.kind, e.seq, e.duration_ms) for e in found] == [
        ("model_call", 1, 812.5),
        ("tool_call", 2, 40.0),
    ]
    assert found[0].data == {"input": 12, "stop_reason": "tool_use"}
    assert [e.run_id for e in await store.run_traces([first, second])] == [first, first, second]
    assert len(await store.run_traces([first, second], limit=1)) == 1
    assert await store.run_traces([]) == []


async def test_a_trace_of_a_run_that_is_gone_is_skipped_and_the_rest_kept(
    store: ConversationStore,
) -> None:
    _, run = await a_run(store, "slack:T1:C1:1.0")
    await store.append_trace_events(
        [TraceEvent(run + 1000, "answer", 1.0, 5.0), TraceEvent(run, "answer", 1.0, 7.0)]
    )
    assert [e.duration_ms for e in await store.run_traces([run, run + 1000])] == [7.0]


async def test_an_oversized_or_unknown_trace_event_is_bounded_or_refused(
    store: ConversationStore,
) -> None:
    _, run = await a_run(store, "slack:T1:C1:1.0")
    huge = {"result": "x" * (MAX_TRACE_DATA_BYTES + 10)}
    await store.append_trace_events([TraceEvent(run, "tool_call", 1.0, 1.0, huge, 1)])
    (stored,) = await store.run_traces([run])
    assert "omitted" in stored.data and "result" not in stored.data
    with pytest.raises(ValueError):
        await store.append_trace_events([TraceEvent(run, "drop table", 1.0)])  # type: ignore[arg-type]


async def test_conversations_filter_by_platform_channel_person_outcome_and_feedback(
    store: ConversationStore,
) -> None:
    c1, r1 = await a_run(store, "slack:T1:C1:1.0", user="U1")
    c2, r2 = await a_run(store, "slack:T1:C2:2.0", user="U2")
    c3, r3 = await a_run(store, "discord:9:8", user="42")
    await store.finish_run(r1, "done")
    await store.finish_run(r2, "error", error="boom")
    await store.set_run_feedback(r2, "U9", "down")
    await store.set_run_feedback(r1, "U9", "up")

    async def keys(**wanted: object) -> list[str]:
        found = await store.console_conversations(ConversationFilter(**wanted), limit=50)  # type: ignore[arg-type]
        return sorted(s.key for s in found)

    assert await keys() == sorted(["slack:T1:C1:1.0", "slack:T1:C2:2.0", "discord:9:8"])
    assert await keys(platform="discord") == ["discord:9:8"]
    assert await keys(channel_key="slack:T1:C2") == ["slack:T1:C2:2.0"]
    assert await keys(person="U1") == ["slack:T1:C1:1.0"]
    assert await keys(outcome="error") == ["slack:T1:C2:2.0"]
    assert await keys(feedback="down") == ["slack:T1:C2:2.0"]
    assert await keys(platform="slack", feedback="up") == ["slack:T1:C1:1.0"]
    (row,) = await store.console_conversations(ConversationFilter(outcome="error"), limit=5)
    assert (row.runs, row.last_outcome, row.ups, row.downs) == (1, "error", 0, 1)
    with pytest.raises(ValueError):
        await store.console_conversations(ConversationFilter(platform="x' OR 1=1 --"), limit=5)
    assert (c1, c2, c3) and r3


async def test_conversations_page_through_newest_first(store: ConversationStore) -> None:
    for n in range(5):
        await a_run(store, f"slack:T1:C1:{n}.0")
    first = await store.console_conversations(ConversationFilter(), limit=2)
    assert len(first) == 2
    last = first[-1]
    rest = await store.console_conversations(
        ConversationFilter(), limit=10, before=(last.updated_at, last.id)
    )
    seen = [s.id for s in first + rest]
    assert len(seen) == 5 == len(set(seen))


async def test_conversation_runs_newest_first_and_bounded(store: ConversationStore) -> None:
    conversation, first = await a_run(store, "slack:T1:C1:1.0")
    await store.finish_run(first, "done")
    second = await store.start_run(conversation, user_id="U1", model="m")
    runs = await store.conversation_runs(conversation, limit=10)
    assert [r.id for r in runs] == [second.id, first]
    assert [r.id for r in await store.conversation_runs(conversation, limit=1)] == [second.id]


async def test_feedback_lists_thumbs_down_first_and_keeps_a_review(
    store: ConversationStore,
) -> None:
    _, liked = await a_run(store, "slack:T1:C1:1.0")
    _, disliked = await a_run(store, "slack:T1:C1:2.0")
    await store.set_run_feedback(disliked, "U1", "down")
    await store.set_run_feedback(liked, "U2", "up")  # the latest vote, still listed second
    items = await store.feedback_items(limit=10)
    assert [(i.run_id, i.downs, i.ups) for i in items] == [(disliked, 1, 0), (liked, 0, 1)]
    assert items[0].review is None
    await store.review_feedback(disliked, by="slack:U7", note="model misread the question")
    await store.review_feedback(disliked, by="slack:U8", note="fixed the prompt")
    reviewed = await store.feedback_items(limit=10, reviewed=True)
    assert [i.run_id for i in reviewed] == [disliked]
    assert reviewed[0].review is not None
    assert (reviewed[0].review.reviewed_by, reviewed[0].review.note) == (
        "slack:U8",
        "fixed the prompt",
    )
    assert [i.run_id for i in await store.feedback_items(limit=10, reviewed=False)] == [liked]
    with pytest.raises(KeyError):
        await store.review_feedback(disliked + 1000, by="slack:U7", note="?")


async def test_search_reaches_a_conversation_filter(store: ConversationStore) -> None:
    conversation, run = await a_run(store, "slack:T1:C1:1.0")
    await store.append_message(conversation, UserMessage(content="where is the invoice?"))
    await store.append_message(
        conversation, AssistantMessage(content=[Text(text="In the billing folder.")]), run_id=run
    )
    await a_run(store, "slack:T1:C1:2.0")
    found = await store.console_conversations(ConversationFilter(search="billing"), limit=5)
    assert [s.key for s in found] == ["slack:T1:C1:1.0"]
    none = await store.console_conversations(ConversationFilter(search='"*)( OR'), limit=5)
    assert none == []


async def test_answer_timings_are_percentiles_of_the_answers_shown_in_the_period(
    store: ConversationStore,
) -> None:
    runs = []
    for n in range(1, 21):
        _, run = await a_run(store, f"slack:T1:C1:{n}.0")
        runs.append(run)
    _, elsewhere = await a_run(store, "discord:9:8")
    await store.append_trace_events(
        [
            TraceEvent(run, "answer", 1000.0 + n, 100.0 * n, {"first_post_ms": 10.0 * n}, 1)
            for n, run in enumerate(runs, start=1)
        ]
        + [
            TraceEvent(runs[0], "model_call", 1000.0, 99_999.0, {}, 2),  # not an answer
            TraceEvent(elsewhere, "answer", 1000.0, 50_000.0, {}, 1),  # no first post
        ]
    )
    slack = await store.answer_timings(since=0.0, platform="slack")
    assert slack.runs == 20
    assert (slack.answer_p50_ms, slack.answer_p95_ms) == (1000.0, 1900.0)
    assert (slack.first_post_p50_ms, slack.first_post_p95_ms) == (100.0, 190.0)
    everywhere = await store.answer_timings(since=0.0)
    assert everywhere.runs == 21 and everywhere.answer_p95_ms == 2000.0
    late = await store.answer_timings(since=1015.5, channel_key="slack:T1:C1")
    assert late.runs == 5 and late.answer_p50_ms == 1800.0
    none = await store.answer_timings(since=10_000.0)
    assert none.runs == 0 and none.answer_p50_ms is None and none.first_post_p95_ms is None
