"""Store behaviour callers rely on, pinned through the public API: a store opened with
`async with` is closed when the block ends; runs and usage rows carry the model; the usage
window starts at its timestamp exactly; a finished run keeps its first outcome and totals."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from core.messages import AssistantMessage, Text, Usage, UserMessage
from storage.base import Conversation, RunRecord, SchemaError
from storage.sqlite import SqliteStore
from tests.storage.test_batching import traced


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


T0 = 1_800_000_000.0


async def test_leaving_async_with_open_closes_the_store(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "a.db") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        await store.append_message(conversation.id, UserMessage(content="kept"))
    with pytest.raises(RuntimeError, match="closed"):
        await store.get_conversation("k")
    # Closed cleanly: the data is there for the next opener.
    async with SqliteStore.open(tmp_path / "a.db") as again:
        found = await again.get_conversation("k")
        assert found is not None
        assert [s.message.text() for s in (await again.load(found.id)).messages] == ["kept"]


async def test_leaving_async_with_an_opened_store_closes_it(tmp_path: Path) -> None:
    opened = await SqliteStore.open(tmp_path / "b.db")
    async with opened as store:
        assert store is opened
        await store.get_or_create_conversation("k", channel_key="c")
    with pytest.raises(RuntimeError, match="closed"):
        await opened.get_conversation("k")


async def test_an_error_inside_async_with_still_closes_the_store(tmp_path: Path) -> None:
    with pytest.raises(LookupError):
        async with SqliteStore.open(tmp_path / "c.db") as store:
            raise LookupError("a caller's failure")
    with pytest.raises(RuntimeError, match="closed"):
        await store.get_conversation("k")


async def test_runs_and_usage_rows_record_the_model(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    async with SqliteStore.open(path, clock=Clock(T0)) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, user_id="U1", model="model-a")
        assert run.model == "model-a" and run.channel_key == "chan" and run.user_id == "U1"
        await store.record_usage(run.id, Usage(input=10, output=1, cost=0.5))  # the run's model
        await store.record_usage(run.id, Usage(input=20, output=2, cost=0.25), model="model-b")
        finished = await store.finish_run(run.id, "done")
        assert finished.model == "model-a"
        assert (finished.usage.input, finished.usage.output) == (30, 3)
        assert finished.usage.cost == pytest.approx(0.75)
        with pytest.raises(KeyError):
            await store.record_usage(run.id + 100, Usage(input=1))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT model, input_tokens, user_id, channel_key FROM usage_ledger ORDER BY id"
        ).fetchall()
    assert rows == [("model-a", 10, "U1", "chan"), ("model-b", 20, "U1", "chan")]


async def test_usage_since_starts_at_its_timestamp_exactly(tmp_path: Path) -> None:
    clock = Clock(T0)
    async with SqliteStore.open(tmp_path / "e.db", clock=clock) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, user_id="U1", model="m")
        for at, cost in ((T0 - 1, 1.0), (T0, 2.0), (T0 + 1, 4.0)):
            clock.now = at
            await store.record_usage(run.id, Usage(input=1, cost=cost))
        assert (await store.usage_since(T0)).cost == pytest.approx(6.0)
        assert (await store.usage_since(T0 + 0.5)).cost == pytest.approx(4.0)
        assert (await store.usage_since(T0 - 1)).cost == pytest.approx(7.0)
        assert (await store.usage_since(T0 + 2)).cost == 0.0
        narrowed = await store.usage_since(T0, conversation_id=conversation.id, user_id="U1")
        assert narrowed.input == 2
        assert (await store.usage_since(T0, user_id="U2")).input == 0


async def test_a_finished_run_keeps_its_first_outcome_error_and_time(tmp_path: Path) -> None:
    clock = Clock(T0)
    async with SqliteStore.open(tmp_path / "f.db", clock=clock) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, model="m")
        assert (run.outcome, run.started_at, run.finished_at) == ("running", T0, None)
        clock.now = T0 + 5
        first = await store.finish_run(run.id, "aborted", error="Stopped by Bob.")
        assert (first.outcome, first.error, first.finished_at) == (
            "aborted",
            "Stopped by Bob.",
            T0 + 5,
        )
        clock.now = T0 + 9
        late = await store.finish_run(run.id, "done")
        assert (late.outcome, late.error, late.finished_at) == (
            "aborted",
            "Stopped by Bob.",
            T0 + 5,
        )
        assert await store.running_runs() == []
        with pytest.raises(ValueError):
            await store.finish_run(run.id, "running")


async def test_a_database_in_a_folder_not_made_yet_is_created(tmp_path: Path) -> None:
    path = tmp_path / "data" / "nested" / "teammate.db"
    async with SqliteStore.open(path) as store:
        await store.get_or_create_conversation("k", channel_key="c")
    assert path.is_file()


async def test_updating_a_title_keeps_the_settings_and_the_other_way_round(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "g.db") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c", title="old")
        await store.update_conversation(conversation.id, settings={"model": "m"})
        await store.update_conversation(conversation.id, title="new")
        found = await store.get_conversation("k")
        assert found is not None and (found.title, found.settings) == ("new", {"model": "m"})
        await store.update_conversation(conversation.id, settings={"model": "n"})
        found = await store.get_conversation("k")
        assert found is not None and (found.title, found.settings) == ("new", {"model": "n"})


async def test_a_run_can_be_recorded_against_another_channel(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "h.db") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, channel_key="elsewhere", owner={"pid": 1})
        assert run.channel_key == "elsewhere" and run.owner == {"pid": 1}
        [listed] = await store.running_runs()
        assert listed.channel_key == "elsewhere" and listed.owner == {"pid": 1}


async def test_every_usage_figure_is_kept_apart_while_running_and_once_finished(
    tmp_path: Path,
) -> None:
    async with SqliteStore.open(tmp_path / "i.db", clock=Clock(T0)) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, model="m")
        usage = Usage(input=1, output=2, cache_read=3, cache_write=4, cost=0.5)
        await store.record_usage(run.id, usage)
        await store.record_usage(run.id, usage)
        expected = Usage(input=2, output=4, cache_read=6, cache_write=8, cost=1.0)
        [running] = await store.running_runs()
        assert running.usage == expected  # the ledger so far
        assert (await store.finish_run(run.id, "done")).usage == expected
        assert (await store.usage_since(T0, conversation_id=conversation.id)) == expected


async def test_appending_returns_the_stored_message_and_its_seq(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "j.db") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        message = UserMessage(content="hello")
        first = await store.append_message(conversation.id, message)
        second = await store.append_message(conversation.id, UserMessage(content="again"))
        assert (first.seq, second.seq) == (1, 2)
        assert first.message == message and second.message.text() == "again"


async def test_a_path_that_cannot_hold_a_database_fails_to_open(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(sqlite3.Error):
        await SqliteStore.open(folder)


async def test_a_closed_store_refuses_reads_and_writes_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "teammate.db"
    store = await SqliteStore.open(path)
    conversation = await store.get_or_create_conversation("k", channel_key="c")
    await store.close()
    with pytest.raises(RuntimeError) as read:
        await store.get_conversation("k")
    with pytest.raises(RuntimeError) as write:
        await store.append_message(conversation.id, UserMessage(content="late"))
    for refused in (read, write):
        assert str(refused.value) == f"the store for {path} is closed"


async def test_an_in_memory_store_opens_and_keeps_what_it_is_given() -> None:
    async with SqliteStore.open(":memory:") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        await store.append_message(conversation.id, UserMessage(content="hello"))
        loaded = await store.load(conversation.id)
        assert [s.message.text() for s in loaded.messages] == ["hello"]


async def test_a_reply_appended_with_its_usage_records_even_one_token_and_its_model(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.db"
    async with SqliteStore.open(path, clock=Clock(T0)) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        run = await store.start_run(conversation.id, user_id="U1", model="model-a")
        reply = AssistantMessage(content=[Text(text="hi")])
        await store.append_message(
            conversation.id, reply, run_id=run.id, usage=Usage(output=1), model="model-b"
        )
        finished = await store.finish_run(run.id, "done")
        assert finished.usage.output == 1
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT model, output_tokens FROM usage_ledger").fetchall()
    assert rows == [("model-b", 1)]


async def test_a_failed_open_leaves_no_file_behind_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    working = tmp_path / "cwd"
    working.mkdir()
    monkeypatch.chdir(working)
    with pytest.raises(sqlite3.Error):
        await SqliteStore.open(folder)
    assert list(working.iterdir()) == [] and list(folder.iterdir()) == []


async def test_reads_made_together_are_all_answered(tmp_path: Path) -> None:
    # reads queued behind one in flight run as one batch on the reader connection
    async with SqliteStore.open(tmp_path / "k.db") as store:
        for n in range(5):
            await store.get_or_create_conversation(f"k{n}", channel_key="c")
        found = await asyncio.gather(*(store.get_conversation(f"k{n % 5}") for n in range(20)))
        assert [c.key for c in found if c is not None] == [f"k{n % 5}" for n in range(20)]


async def test_a_file_that_is_not_a_database_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 100)
    with pytest.raises(SchemaError) as refused:
        await SqliteStore.open(path)
    assert str(refused.value).startswith(f"{path} is not a SQLite database")
    assert path.read_bytes() == b"these are my notes, not a database" * 100


async def test_the_integrity_check_names_rows_that_refer_to_missing_rows(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    async with SqliteStore.open(path) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        await store.append_message(conversation.id, UserMessage(content="kept"))
        assert await store.integrity_check() == []
    with closing(sqlite3.connect(path)) as db:  # foreign keys are off by default here
        db.execute("DELETE FROM conversations")
        db.commit()
        (rowid,) = db.execute("SELECT rowid FROM messages").fetchone()
    async with SqliteStore.open(path) as store:
        assert await store.integrity_check() == [
            f"messages row {rowid} refers to a missing conversations"
        ]


async def test_usage_needs_its_run_and_a_reply_that_used_no_tokens_costs_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    async with SqliteStore.open(path, clock=Clock(T0)) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        reply = AssistantMessage(content=[Text(text="hi")])
        with pytest.raises(ValueError) as refused:
            await store.append_message(conversation.id, reply, usage=Usage(input=1))
        assert str(refused.value) == "usage is recorded against a run: give run_id"
        run = await store.start_run(conversation.id, model="m")
        await store.append_message(conversation.id, reply, run_id=run.id, usage=Usage())
        await store.append_message(conversation.id, reply, run_id=run.id, usage=Usage(output=1))
    with closing(sqlite3.connect(path)) as db:
        ledger = db.execute("SELECT input_tokens, output_tokens FROM usage_ledger").fetchall()
    assert ledger == [(0, 1)]  # one entry: the reply with no tokens left none


async def test_a_usage_summary_narrowed_by_several_filters_keeps_only_what_fits_all(
    tmp_path: Path,
) -> None:
    async with SqliteStore.open(tmp_path / "n.db", clock=Clock(T0)) as store:
        here = await store.get_or_create_conversation("k1", channel_key="chan")
        there = await store.get_or_create_conversation("k2", channel_key="other")
        for conversation, user, tokens in ((here, "U1", 1), (here, "U2", 10), (there, "U1", 100)):
            run = await store.start_run(conversation.id, user_id=user, model="m")
            await store.record_usage(run.id, Usage(input=tokens))
            await store.set_run_feedback(run.id, "U9", "up")
        both = await store.usage_summary(T0, user_id="U1", channel_key="chan")
        assert (both.usage.input, both.runs, both.votes_up) == (1, 1, 1)
        every = await store.usage_summary(
            T0, conversation_id=there.id, user_id="U1", channel_key="other"
        )
        assert (every.usage.input, every.runs, every.votes_up) == (100, 1, 1)


async def test_usage_recorded_together_is_all_counted_and_an_unknown_run_refused_alone(
    tmp_path: Path,
) -> None:
    async with SqliteStore.open(tmp_path / "o.db", clock=Clock(T0)) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        run = await store.start_run(conversation.id, model="m")
        statements = await traced(store._writer)
        results = await asyncio.gather(
            *(store.record_usage(run.id, Usage(input=n, cost=0.5)) for n in range(1, 11)),
            store.record_usage(run.id + 99, Usage(input=1000)),
            return_exceptions=True,
        )
        assert results[:10] == [None] * 10 and isinstance(results[10], KeyError)
        # one batch, answered without the retry a failed batch needs
        assert statements.count("BEGIN IMMEDIATE") == 1 and "ROLLBACK" not in statements
        finished = await store.finish_run(run.id, "done")
        assert finished.usage.input == 55 and finished.usage.cost == pytest.approx(5.0)


async def accept(store: SqliteStore, key: str, text: str) -> tuple[int, int]:
    accepted = await store.accept_delivery(
        key, UserMessage(content=text), channel_key="c", delivery_id=None
    )
    assert accepted is not None
    return accepted.conversation.id, accepted.item.id


async def test_a_delivery_skips_settled_items_and_still_delivers_the_rest(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "p.db") as store:
        cid, first = await accept(store, "k", "first")
        _, second = await accept(store, "k", "second")
        _, third = await accept(store, "k", "third")
        await store.drop(cid, [first], "stopped")
        delivered = await store.deliver(cid, [first, second, second, third])
        assert [s.message.text() for s in delivered] == ["second", "third"]


async def test_writes_made_together_are_one_batch_with_each_callers_own_answer(
    tmp_path: Path,
) -> None:
    async with SqliteStore.open(tmp_path / "q.db") as store:
        cid, first = await accept(store, "k", "first")
        _, second = await accept(store, "k", "second")
        other, elsewhere = await accept(store, "k2", "elsewhere")
        await store.drop(cid, [first], "stopped")
        statements = await traced(store._writer)

        results = await asyncio.gather(
            store.claim_delivery("alone"),  # runs at once; the others queue behind it
            store.get_or_create_conversation("new", channel_key="c", title="made"),
            store.get_or_create_conversation("k", channel_key="ignored"),
            store.get_or_create_conversation("new", channel_key="c"),
            store.deliver(cid, [elsewhere]),  # not this conversation's item
            store.deliver(cid, [first, second]),
            store.deliver(other, [elsewhere]),
            return_exceptions=True,
        )

        made, existing, again = results[1:4]
        assert isinstance(made, Conversation) and (made.key, made.title) == ("new", "made")
        assert isinstance(existing, Conversation) and existing.id == cid
        assert existing.channel_key == "c"
        assert isinstance(again, Conversation) and again.id == made.id
        assert isinstance(results[4], KeyError)
        here, there = results[5], results[6]
        assert isinstance(here, list) and [s.message.text() for s in here] == ["second"]
        assert isinstance(there, list) and [s.message.text() for s in there] == ["elsewhere"]
        # one transaction, answered without the retry a failed batch needs
        assert statements.count("BEGIN IMMEDIATE") == 1 and "ROLLBACK" not in statements


async def test_finishing_an_unknown_run_names_it_alone_or_among_others(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "r.db") as store:
        conversation = await store.get_or_create_conversation("k", channel_key="c")
        runs = [await store.start_run(conversation.id, model="m") for _ in range(3)]
        with pytest.raises(KeyError) as alone:
            await store.finish_run(4242, "done")
        statements = await traced(store._writer)
        results = await asyncio.gather(
            *(store.finish_run(run.id, "done") for run in runs),
            store.finish_run(4343, "error", error="x"),
            return_exceptions=True,
        )
        assert [r.outcome for r in results[:3]] == ["done"] * 3  # type: ignore[union-attr]
        among = results[3]
        assert isinstance(among, KeyError)
        assert (alone.value.args, among.args) == (
            ("no run with id 4242",),
            ("no run with id 4343",),
        )
        assert await store.running_runs() == []
        # one transaction, answered without the retry a failed batch needs
        assert statements.count("BEGIN IMMEDIATE") == 1 and "ROLLBACK" not in statements


async def test_runs_started_together_each_get_their_channel_and_their_refusal(
    tmp_path: Path,
) -> None:
    async with SqliteStore.open(tmp_path / "s.db") as store:
        cid, mine = await accept(store, "k", "mine")
        _, yours = await accept(store, "k2", "yours")
        statements = await traced(store._writer)
        results = await asyncio.gather(
            store.claim_delivery("alone"),  # runs at once; the others queue behind it
            store.start_run(cid, model="m"),
            store.start_run(cid, model="m", channel_key="elsewhere"),
            store.start_run(cid, model="m", deliver=[yours]),  # not this conversation's item
            store.start_run(cid, model="m", deliver=[mine]),
            store.start_run(987654, model="m"),
            return_exceptions=True,
        )
        plain, moved, refused, delivering, unknown = results[1:]
        assert isinstance(plain, RunRecord) and plain.channel_key == "c"
        assert isinstance(moved, RunRecord) and moved.channel_key == "elsewhere"
        assert isinstance(refused, KeyError) and isinstance(unknown, KeyError)
        assert isinstance(delivering, RunRecord) and delivering.conversation_key == "k"
        assert sorted(r.id for r in await store.running_runs()) == sorted(
            [plain.id, moved.id, delivering.id]
        )
        assert [s.message.text() for s in (await store.load(cid)).messages] == ["mine"]
        assert statements.count("BEGIN IMMEDIATE") == 1 and "ROLLBACK" not in statements


async def test_a_conversation_keeps_when_it_was_made_and_tells_when_it_changed(
    tmp_path: Path,
) -> None:
    clock = Clock(T0)
    async with SqliteStore.open(tmp_path / "t.db", clock=clock) as store:
        made = await store.get_or_create_conversation("k", channel_key="c")
        assert (made.created_at, made.updated_at) == (T0, T0)
        clock.now = T0 + 60
        await store.update_conversation(made.id, title="renamed")
        found = await store.get_conversation("k")
        assert found is not None and (found.created_at, found.updated_at) == (T0, T0 + 60)
        [listed] = await store.channel_conversations("c", limit=5)
        assert (listed.created_at, listed.updated_at) == (T0, T0 + 60)


async def test_a_run_read_back_is_the_run_that_was_started(tmp_path: Path) -> None:
    clock = Clock(T0)
    async with SqliteStore.open(tmp_path / "u.db", clock=clock) as store:
        conversation = await store.get_or_create_conversation("k", channel_key="chan")
        started = await store.start_run(
            conversation.id, user_id="U7", model="m", surface_ref={"ts": "1.2"}
        )
        [running] = await store.running_runs()
        clock.now = T0 + 3
        finished = await store.finish_run(started.id, "done")
        for run in (running, finished):
            assert (run.id, run.conversation_id, run.conversation_key) == (
                started.id,
                conversation.id,
                "k",
            )
            assert (run.started_at, run.user_id, run.channel_key, run.model) == (
                T0,
                "U7",
                "chan",
                "m",
            )
            assert run.surface_ref == {"ts": "1.2"}
        assert (finished.outcome, finished.finished_at) == ("done", T0 + 3)


async def test_a_stored_configuration_that_is_not_an_object_is_refused_with_a_short_excerpt(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    async with SqliteStore.open(path) as store:
        await store.set_channel_config("c", {"model": "m"}, by="U1")
    stored = "[" + ", ".join(str(n) for n in range(100)) + "]"
    with closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE channel_config SET config = ?", (stored,))
        db.commit()
    async with SqliteStore.open(path) as store:
        with pytest.raises(SchemaError) as refused:
            await store.get_channel_config("c")
    assert str(refused.value) == (f"a stored configuration is not a JSON object: {stored[:80]!r}")
