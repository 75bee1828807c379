"""What only PostgreSQL has to get right: several instances on one database (races for the same
delivery and the same inbox item), its schema checks, and being chosen by
`TEAMMATE_DATABASE_URL` (`teammate doctor` reports it, never its password)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from bots.app import open_store
from bots.settings import Settings
from core.messages import AssistantMessage, Author, Text, Usage, UserMessage
from storage.base import (
    LeaseLost,
    NewInboxItem,
    Notification,
    Resync,
    SchemaError,
    StopRequest,
)
from storage.postgres import PostgresStore, redact_url
from storage.postgres_migrations import MIGRATIONS
from storage.postgres_pool import Pool
from tests.bots.test_cli import cli_env, teammate
from tests.storage import pg

KEY = "slack:T:C1:1.0"
CHANNEL = "slack:T:C1"


def user(text: str) -> UserMessage:
    return UserMessage(content=text, author=Author(id="U1", name="u1"), timestamp=1.0)


async def test_two_instances_racing_for_one_delivery_accept_it_exactly_once(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        for n in range(30):
            results = await asyncio.gather(
                *(
                    store.accept_delivery(
                        KEY, user(f"m{n}"), channel_key=CHANNEL, delivery_id=f"ev{n}"
                    )
                    for store in (a, b, a, b)
                )
            )
            assert sum(result is not None for result in results) == 1, n
            claims = await asyncio.gather(a.claim_delivery(f"x{n}"), b.claim_delivery(f"x{n}"))
            assert sorted(claims) == [False, True]
        conversation = await a.get_conversation(KEY)
        assert conversation is not None
        pending = await b.pending(conversation.id)
        assert [item.message.text() for item in pending] == [f"m{n}" for n in range(30)]


async def test_two_instances_delivering_the_same_item_store_it_once(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        for n in range(20):
            accepted = await a.accept_delivery(
                KEY, user(f"m{n}"), channel_key=CHANNEL, delivery_id=None
            )
            assert accepted is not None
            conversation_id = accepted.conversation.id
            one, two = await asyncio.gather(
                a.deliver(conversation_id, [accepted.item.id]),
                b.deliver(conversation_id, [accepted.item.id]),
            )
            assert len(one) + len(two) == 1, n
        loaded = await a.load(conversation_id)
        assert [s.message.text() for s in loaded.messages] == [f"m{n}" for n in range(20)]
        assert [s.seq for s in loaded.messages] == list(range(1, 21))


async def test_first_messages_to_one_new_thread_on_two_instances_store_the_backfill_once(
    pg_url: str,
) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        for n in range(10):
            key = f"{KEY}{n}"
            results = await asyncio.gather(
                *(
                    store.accept_delivery(
                        key,
                        user(f"first {i}"),
                        channel_key=CHANNEL,
                        delivery_id=f"ev{n}.{i}",
                        backfill=[user("before")],
                    )
                    for i, store in enumerate((a, b, a, b))
                )
            )
            assert sum(r is not None and r.created for r in results) == 1
            conversation = await a.get_conversation(key)
            assert conversation is not None
            loaded = await b.load(conversation.id)
            assert [s.message.text() for s in loaded.messages] == ["before"]


async def test_instances_starting_at_once_migrate_a_fresh_schema_once(pg_url: str) -> None:
    stores = await asyncio.gather(*(PostgresStore.open(pg_url) for _ in range(4)))
    try:
        about = await stores[0].describe()
        assert about["version"] == len(MIGRATIONS)
        connection = await asyncpg.connect(pg_url)
        try:
            names = await connection.fetch("SELECT name FROM schema_migrations ORDER BY version")
        finally:
            await connection.close()
        assert [row[0] for row in names] == [m.name for m in MIGRATIONS]
    finally:
        for store in stores:
            await store.close()


async def test_a_schema_that_is_not_ours_or_is_newer_is_refused_untouched(pg_url: str) -> None:
    connection = await asyncpg.connect(pg_url)
    try:
        await connection.execute("CREATE TABLE invoices (id int)")
        with pytest.raises(SchemaError, match="not Teammate's"):
            await PostgresStore.open(pg_url)
        assert await connection.fetchval("SELECT count(*) FROM invoices") == 0
        await connection.execute("DROP TABLE invoices")

        await (await PostgresStore.open(pg_url)).close()
        await connection.execute(
            "INSERT INTO schema_migrations VALUES ($1, 'm999_from_the_future', 0)",
            len(MIGRATIONS) + 1,
        )
        with pytest.raises(SchemaError, match="newer Teammate"):
            await PostgresStore.open(pg_url)
    finally:
        await connection.close()


def test_a_url_is_shown_without_its_password() -> None:
    assert (
        redact_url("postgresql://bot:hunter2@db.internal:5432/teammate?sslmode=require")
        == "postgresql://bot:***@db.internal:5432/teammate?sslmode=require"
    )
    assert redact_url("postgresql://db/teammate") == "postgresql://db/teammate"


def with_password(url: str, password: str) -> str:
    # The test servers trust local connections: any password is accepted and ignored.
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@", 1)


async def test_the_database_url_selects_postgres_and_unset_keeps_sqlite(
    pg_url: str, tmp_path: Path
) -> None:
    store = await open_store(Settings(data_dir=tmp_path, database_url=pg_url))
    try:
        assert isinstance(store, PostgresStore)
    finally:
        await store.close()
    sqlite = await open_store(Settings(data_dir=tmp_path))
    try:
        assert not isinstance(sqlite, PostgresStore)
        assert (tmp_path / "teammate.db").exists()
    finally:
        await sqlite.close()


async def test_doctor_reports_the_backend_its_version_and_schema_never_the_password(
    pg_url: str, pg_server: pg.PgServer, tmp_path: Path
) -> None:
    if not pg_url.startswith("postgresql://postgres@"):
        pytest.skip("the test server's URL has no plain user to add a password to")
    secret = "s3cret-pw-47"
    env = cli_env(
        tmp_path, tmp_path / "data", None, TEAMMATE_DATABASE_URL=with_password(pg_url, secret)
    )
    done = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)
    assert done.code == 0, done.out + done.err
    [line] = [line for line in done.out.splitlines() if line.startswith("ok    database:")]
    assert f"PostgreSQL {pg_server.version.split()[0]}" in line
    assert f"schema version {len(MIGRATIONS)}" in line
    assert "reachable" in line and ":***@" in line
    assert secret not in done.out + done.err

    unreachable = with_password(f"postgresql://postgres@127.0.0.1:{pg._free_port()}/x", secret)
    env["TEAMMATE_DATABASE_URL"] = unreachable
    failed = await teammate("--model", "scripted", "doctor", env=env, cwd=tmp_path)
    assert failed.code == 1
    assert "fail  database: PostgreSQL at postgresql://postgres:***@127.0.0.1" in failed.out
    assert secret not in failed.out + failed.err


async def next_notice(notices: AsyncIterator[Notification]) -> Notification:
    return await asyncio.wait_for(anext(notices), timeout=30)  # a hang guard only


async def test_a_conversation_lease_is_held_by_one_instance_until_released(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        conversation = await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
        for _ in range(10):
            got = await asyncio.gather(
                a.acquire_lease(conversation.id), b.acquire_lease(conversation.id)
            )
            assert sorted(got) == [False, True]
            holder, other = (a, b) if got[0] else (b, a)
            assert await holder.acquire_lease(conversation.id) is True  # renewing is fine
            assert await other.acquire_lease(conversation.id) is False
            await holder.release_lease(conversation.id)


async def test_a_dead_instances_lease_expires_and_another_takes_over(pg_url: str) -> None:
    async with (
        PostgresStore.open(pg_url, lease_ttl_s=0.5) as a,
        PostgresStore.open(pg_url, lease_ttl_s=0.5) as b,
    ):
        conversation = await a.get_or_create_conversation(KEY, channel_key=CHANNEL)
        assert await a.acquire_lease(conversation.id)
        notices = a.notifications()
        listening = asyncio.ensure_future(next_notice(notices))
        # Renewed while A lives: B is refused for several lease lifetimes.
        for _ in range(6):
            assert await b.acquire_lease(conversation.id) is False
            await asyncio.sleep(0.25)
        # A stalls (its heartbeat stops, as in a frozen or killed process): the lease expires.
        heartbeat = a._instances._heartbeat
        assert heartbeat is not None
        heartbeat.cancel()
        for _ in range(200):
            if await b.acquire_lease(conversation.id):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the lease never expired")
        # A wakes up: its next heartbeat finds the lease gone and says so.
        a._instances._heartbeat = None
        a._instances._start_heartbeat()
        assert await listening == LeaseLost(conversation.id)
        assert await a.acquire_lease(conversation.id) is False


async def test_instances_hear_of_each_others_inbox_items_and_stops_never_their_own(
    pg_url: str,
) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        a_notices, b_notices = a.notifications(), b.notifications()
        first = asyncio.ensure_future(next_notice(a_notices))
        await asyncio.sleep(0)
        accepted = await b.accept_delivery(KEY, user("hi"), channel_key=CHANNEL, delivery_id="e1")
        assert accepted is not None
        assert await first == NewInboxItem(accepted.conversation.id, KEY, accepted.item.id)
        # A repeated delivery commits nothing, so it notifies nobody.
        assert (
            await b.accept_delivery(KEY, user("hi"), channel_key=CHANNEL, delivery_id="e1") is None
        )
        await b.publish_stop(KEY, 7, by_id="U2", by_name="bob")
        assert await next_notice(a_notices) == StopRequest(KEY, 7, "U2", "bob")
        # B heard nothing of its own: the first thing it hears is A's.
        await a.publish_stop(KEY, None)
        assert await next_notice(b_notices) == StopRequest(KEY, None, None, None)


async def test_a_dropped_listening_connection_is_remade_and_says_to_resync(pg_url: str) -> None:
    async with PostgresStore.open(pg_url) as a, PostgresStore.open(pg_url) as b:
        notices = a.notifications()
        admin = await asyncpg.connect(pg_url)
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query = $1 AND pid <> pg_backend_pid()",
                f'LISTEN "{a._instances.channel}"',
            )
        finally:
            await admin.close()
        assert killed == 2  # both stores listen on this schema's channel
        assert await next_notice(notices) == Resync()
        # Listening again: what B sends now reaches A.
        await b.publish_stop(KEY, 1)
        assert await next_notice(notices) == StopRequest(KEY, 1, None, None)


async def test_appends_grouped_in_one_statement_fail_alone_and_keep_every_seq(
    pg_url: str,
) -> None:
    # Two connections: one batch at a time, so everything behind the first append is grouped.
    async with PostgresStore.open(pg_url, min_connections=1, max_connections=2) as store:
        one = await store.get_or_create_conversation("k1", channel_key="c")
        two = await store.get_or_create_conversation("k2", channel_key="c")
        run = await store.start_run(one.id, user_id="U1", model="m")
        usage = Usage(input=10, output=2, cost=0.5)
        calls = []
        for i in range(40):
            calls.append(store.append_message(one.id, user(f"one {i}")))
            calls.append(store.append_message(two.id, user(f"two {i}")))
            if i % 10 == 0:
                calls.append(store.append_message(404, user("nowhere")))
                calls.append(store.append_message(two.id, user("bad run"), run_id=9999))
            if i % 4 == 0:
                reply = AssistantMessage(content=[Text(text=f"r{i}")])
                calls.append(store.append_message(one.id, reply, run_id=run.id, usage=usage))
        results = await asyncio.gather(*calls, return_exceptions=True)

        failures = [r for r in results if isinstance(r, BaseException)]
        assert len(failures) == 8 and all(isinstance(f, KeyError) for f in failures)
        for conversation, count in ((one, 50), (two, 40)):
            loaded = await store.load(conversation.id)
            assert [s.seq for s in loaded.messages] == list(range(1, count + 1))
        texts = [s.message.text() for s in (await store.load(two.id)).messages]
        assert texts == [f"two {i}" for i in range(40)]  # in call order, "bad run" never
        finished = await store.finish_run(run.id, "done")
        assert finished.usage.input == 100 and finished.usage.cost == pytest.approx(5.0)


async def test_the_pool_serves_everyone_and_never_reuses_an_interrupted_connection(
    pg_url: str,
) -> None:
    pool = await Pool.open(pg_url, min_size=1, max_size=2)
    admin = await asyncpg.connect(pg_url)
    try:
        # Far more callers than connections: each waits its turn, none is lost.
        assert await asyncio.gather(*(pool.fetchval("SELECT $1::int", n) for n in range(60))) == (
            list(range(60))
        )
        # A caller interrupted mid-query: its connection is in an unknown state.
        sleeping = asyncio.ensure_future(pool.fetchval("SELECT pg_sleep(30)"))
        for _ in range(1000):  # until the server runs it (a hang guard, not a timing)
            if await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'"
            ):
                break
            await asyncio.sleep(0.01)
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        # Every later call gets a usable connection (a reused one would still be busy).
        assert await asyncio.gather(*(pool.fetchval("SELECT 1") for _ in range(10))) == [1] * 10
        assert pool.get_max_size() == 2
    finally:
        await admin.close()
        await pool.close()
