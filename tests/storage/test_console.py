"""The console's store calls, on both backends: the session secret kept once, one-time links
good once and only until they expire, and the overview, channels and health reads."""

from __future__ import annotations

from core.messages import Usage
from storage.base import ConversationStore
from tests.storage.conftest import Backend, FakeClock

DAY = 86400.0


async def a_run(
    store: ConversationStore,
    channel: str,
    *,
    user: str = "U1",
    thread: str = "1.0",
    outcome: str | None = "done",
    cost: float = 0.0,
    error: str | None = None,
) -> int:
    conversation = await store.get_or_create_conversation(
        f"{channel}:{thread}", channel_key=channel
    )
    run = await store.start_run(conversation.id, user_id=user, model="m")
    if cost:
        await store.record_usage(run.id, Usage(input=10, output=5, cost=cost))
    if outcome is not None:
        await store.finish_run(run.id, outcome, error=error)  # type: ignore[arg-type]
    return run.id


async def test_the_session_secret_is_kept_once_for_every_opener(backend: Backend) -> None:
    async with backend.open() as first, backend.open() as second:
        kept = await first.console_secret("first-candidate")
        assert kept == "first-candidate"
        assert await second.console_secret("second-candidate") == "first-candidate"
        assert await first.console_secret("third") == "first-candidate"


async def test_a_link_signs_in_once_and_not_after_it_expires(
    backend: Backend, clock: FakeClock
) -> None:
    async with backend.open(clock) as first, backend.open(clock) as second:
        now = clock.now
        await first.add_console_link("hash-a", "slack:U1", expires_at=now + 600)
        await first.add_console_link("hash-b", "discord:42", expires_at=now + 600)
        # Two instances racing for one link: one wins.
        assert await first.use_console_link("hash-a", now=now) == "slack:U1"
        assert await second.use_console_link("hash-a", now=now) is None
        assert await first.use_console_link("unknown", now=now) is None
        assert await second.use_console_link("hash-b", now=now + 601) is None  # expired
        assert await second.use_console_link("hash-b", now=now + 10) == "discord:42"


async def test_the_overview_counts_a_period_s_runs_votes_people_and_cost_by_day(
    store: ConversationStore, clock: FakeClock
) -> None:
    old = await a_run(store, "slack:T:C1", cost=5.0)  # before the period
    clock.advance(2 * DAY)
    since = clock.now - 1
    done = await a_run(store, "slack:T:C1", user="U1", cost=0.25)
    await a_run(store, "slack:T:C2", user="U2", thread="2.0", outcome="error", error="boom")
    await a_run(store, "discord:G:9", user="D1", thread="3.0", outcome="aborted", cost=1.0)
    await a_run(store, "slack:T:C1", user="U1", thread="4.0", outcome="interrupted")
    await a_run(store, "slack:T:C1", user="U3", thread="5.0", outcome=None)  # running
    await store.set_run_feedback(done, "U9", "down")
    await store.set_run_feedback(old, "U9", "up")  # cast now: counts, as `/teammate usage`

    everything = await store.console_overview(since=since)
    assert (everything.runs, everything.answers, everything.failures) == (5, 1, 1)
    assert everything.interruptions == 2
    assert everything.people == 4  # U1, U2, D1, U3
    assert (everything.votes_up, everything.votes_down) == (1, 1)
    assert round(everything.cost_usd, 6) == 1.25
    assert {(d.channel_key, round(d.cost_usd, 6)) for d in everything.daily_cost} == {
        ("slack:T:C1", 0.25),
        ("discord:G:9", 1.0),
    }
    assert everything.answer_p50_s is not None and everything.answer_p50_s >= 0

    slack = await store.console_overview(since=since, platform="slack")
    assert (slack.runs, slack.people, round(slack.cost_usd, 6)) == (4, 3, 0.25)
    channel = await store.console_overview(since=since, channel_key="slack:T:C2")
    assert (channel.runs, channel.failures, channel.votes_down) == (1, 1, 0)
    nothing = await store.console_overview(since=clock.now + DAY)
    assert (nothing.runs, nothing.cost_usd, nothing.answer_p95_s) == (0, 0.0, None)


async def test_time_to_answer_percentiles_come_from_finished_runs(
    store: ConversationStore, clock: FakeClock
) -> None:
    since = clock.now
    for n, took in enumerate([1.0, 2.0, 3.0, 4.0, 100.0]):
        conversation = await store.get_or_create_conversation(
            f"slack:T:C1:{n}", channel_key="slack:T:C1"
        )
        run = await store.start_run(conversation.id, user_id="U1")
        clock.advance(took)
        await store.finish_run(run.id, "done")
    overview = await store.console_overview(since=since)
    assert overview.answer_p50_s is not None and 2.0 <= overview.answer_p50_s <= 3.0
    assert overview.answer_p95_s is not None and overview.answer_p95_s >= 4.0


async def test_channels_list_every_channel_with_its_period(
    store: ConversationStore, clock: FakeClock
) -> None:
    await a_run(store, "slack:T:C1", cost=2.0)
    clock.advance(40 * DAY)
    await a_run(store, "slack:T:C1", thread="2.0", cost=0.5)
    await store.set_channel_config("discord:G:7", {"model": "x"}, by="D1")
    channels = await store.console_channels(since=clock.now - DAY, limit=10)
    by_key = {c.channel_key: c for c in channels}
    assert set(by_key) == {"slack:T:C1", "discord:G:7"}
    assert (by_key["slack:T:C1"].conversations, by_key["slack:T:C1"].runs) == (2, 1)
    assert round(by_key["slack:T:C1"].cost_usd, 6) == 0.5
    assert by_key["discord:G:7"].conversations == 0
    assert len(await store.console_channels(since=0, limit=1)) == 1


async def test_health_shows_running_runs_pending_messages_and_recent_errors(
    store: ConversationStore,
) -> None:
    running = await a_run(store, "slack:T:C1", outcome=None)
    await a_run(store, "slack:T:C1", thread="2.0", outcome="error", error="ref abc123")
    from core.messages import UserMessage

    await store.accept_delivery(
        "slack:T:C1:9.0", UserMessage(content="waiting"), channel_key="slack:T:C1", delivery_id="d"
    )
    health = await store.console_health(errors_limit=5)
    assert [r.run_id for r in health.running] == [running]
    assert health.running[0].conversation_key == "slack:T:C1:1.0"
    assert health.inbox_depth == 1 and health.oldest_pending_at is not None
    assert [e.error for e in health.recent_errors] == ["ref abc123"]
    assert health.database_bytes is not None and health.database_bytes > 0
    assert (await store.console_health(errors_limit=0)).recent_errors == ()
