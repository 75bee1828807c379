"""Three Teammate processes on one PostgreSQL database behind a load balancer (the test).

Each instance is its own process (`scale_child.py`: `teammate slack --http`'s wiring with an
echo model, so Slack's threads show which message each answer is for). The test signs Slack
events and sends each to any instance, as a load balancer would, and asserts on what the fake
Slack finally shows:
- mentions over many threads, a third delivered twice (to two different instances), one
  instance SIGKILLed while it holds a run inside a tool call: every distinct message is
  answered exactly once, in each thread in the order asked; the killed run's interruption is
  announced once (by a survivor, after the lease expired) and its thread goes on normally;
- a steering message and a stop that reach another instance than the one running the
  conversation reach that run.

The kill lands after the held message was accepted (it is inside a tool call), and between
rounds of traffic. A kill between acknowledging an event and accepting it is covered by the
event journal (`bots/journal.py`), replayed when that instance starts again:
tests/chaos/test_slack_ack_window.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import pytest

from bots.platforms.slack.surface import DONE_REACTION, STOPPED_REACTION
from bots.recovery import INTERRUPTED_TEXT
from storage.postgres import PostgresStore
from tests.bots.platforms.slack.e2e_harness import message_event
from tests.bots.platforms.slack.scale_child import SECRET
from tests.fakes.slack_server import FakeSlack, signed_request
from tests.storage import pg

ROOT = Path(__file__).resolve().parents[4]
LIMIT_S = 120.0  # a hang guard, not a speed check
CHANNEL = "C1"


@pytest.fixture(scope="module")
def pg_server() -> Iterator[pg.PgServer | None]:
    with pg.server() as found:
        yield found


@dataclass
class Instance:
    process: asyncio.subprocess.Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"


@dataclass
class Cluster:
    fake: FakeSlack
    store: PostgresStore  # the test's own view of the shared database
    instances: list[Instance]
    gates: Path
    session: aiohttp.ClientSession
    sent: list[tuple[int, str]] = field(default_factory=list)  # (instance, event id)

    async def send(self, event: dict[str, Any], *targets: int) -> None:
        """Deliver one Slack event (the same payload, one event id) to each target."""
        payload = self.fake.event_callback(event)
        for target in targets:
            self.sent.append((target, payload["event_id"]))
        statuses = await asyncio.gather(
            *(
                signed_request(self.instances[t].url, payload, SECRET, session=self.session)
                for t in targets
            )
        )
        assert [s.status for s in statuses] == [200] * len(targets)

    def open_gate(self, name: str) -> None:
        (self.gates / name).touch()

    def answers(self, thread_ts: str) -> list[str]:
        """Every `re tok:…` the thread shows, in order."""
        return _dedupe_within_message(self.fake.bot_replies(CHANNEL, thread_ts))

    def interruptions(self, thread_ts: str) -> int:
        """How many messages of the thread announce an interrupted answer."""
        return sum(
            INTERRUPTED_TEXT[:40] in json.dumps(reply, ensure_ascii=False)
            for reply in self.fake.bot_replies(CHANNEL, thread_ts)
        )

    async def wait(self, predicate: Any) -> None:
        await self.fake.wait_for(lambda _fake: predicate(), limit_s=LIMIT_S)

    async def finished(self, token: str, thread_ts: str, message_ts: str) -> None:
        """Wait until `token` is answered in the thread and its message has the ✅: the run is
        recorded as done (a kill while the text streams is an interruption, rightly)."""
        await self.wait(
            lambda: (
                token in self.answers(thread_ts)
                and DONE_REACTION in self.fake.reactions(CHANNEL, message_ts)
            )
        )

    async def runs_closed(self) -> None:
        """Wait until no run is open in the store: a run is closed once its end is shown (the
        ✅ or ⏹ comes first), so the reaction alone does not say it is closed yet."""
        async with asyncio.timeout(LIMIT_S):
            while await self.store.running_runs():  # noqa: ASYNC110 (other processes' runs)
                await asyncio.sleep(0.05)


def _dedupe_within_message(replies: list[dict[str, Any]]) -> list[str]:
    """The tokens answered, one entry per `re tok:X` a message shows (text and blocks say the
    same words: count each message's tokens once)."""
    tokens: list[str] = []
    for reply in replies:
        text = str(reply.get("text") or "")
        if "re tok:" not in text:
            text = json.dumps(reply.get("blocks") or [])
        tokens += [
            part.split()[0].rstrip('",.\\') for part in text.split("re tok:")[1:] if part.strip()
        ]
    return tokens


def _log_file(data_dir: Path) -> BinaryIO:
    """Where an instance's log goes (beside its data directory): read it when a run fails."""
    return (data_dir.parent / f"{data_dir.name}.log").open("ab")


async def _start_instance(fake: FakeSlack, url: str, data_dir: Path, gates: Path) -> Instance:
    log = _log_file(data_dir)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bots.platforms.slack.scale_child",
        fake.api_url,
        url,
        str(data_dir),
        str(gates),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    log.close()  # the child holds its own copy
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), LIMIT_S)
    assert line.startswith(b"PORT "), f"instance did not start: {line!r}"
    return Instance(process, int(line.split()[1]))


@pytest.fixture
async def cluster(pg_server: pg.PgServer | None, tmp_path: Path) -> AsyncIterator[Cluster]:
    if pg_server is None:
        pytest.skip(f"PostgreSQL unavailable: {pg.unavailable_reason}")
    schema = await pg_server.create_schema("scale")
    url = pg_server.schema_url(schema)
    gates = tmp_path / "gates"
    gates.mkdir()
    async with FakeSlack() as fake, PostgresStore.open(url) as store:  # migrated once, here
        instances = await asyncio.gather(
            *(_start_instance(fake, url, tmp_path / f"i{n}", gates) for n in range(3))
        )
        async with aiohttp.ClientSession() as session:
            try:
                yield Cluster(fake, store, list(instances), gates, session)
            finally:
                for instance in instances:
                    if instance.process.returncode is None:
                        instance.process.send_signal(signal.SIGTERM)
                for instance in instances:
                    try:
                        await asyncio.wait_for(instance.process.wait(), 30)
                    except TimeoutError:
                        instance.process.kill()
                        await instance.process.wait()
    await pg_server.drop_schema(schema)


def _mention(cluster: Cluster, text: str, thread_ts: str | None = None) -> dict[str, Any]:
    return message_event(cluster.fake, text, channel=CHANNEL, thread_ts=thread_ts)


async def _many_threads(cluster: Cluster, threads: int, per_thread: int) -> None:
    """`threads` conversations of `per_thread` mentions each (a thread's messages one after
    another, the threads at once), a third of all deliveries sent twice; instance 2 is
    SIGKILLed after the first round while it holds one run inside a tool call."""
    rng = random.Random(12)
    roots: list[str] = []
    expected: dict[str, list[str]] = {}
    victim = 2

    # The run that is killed mid-answer: accepted by the victim, held in its tool call.
    held = _mention(cluster, "tok:held-0 hold:never")
    held_ts = held["ts"]
    await cluster.send(held, victim)
    await cluster.wait(lambda: "Hold" in json.dumps(cluster.fake.bot_replies(CHANNEL, held_ts)))

    deliveries = 0

    async def deliver(event: dict[str, Any], alive: list[int]) -> None:
        nonlocal deliveries
        deliveries += 1
        first = rng.choice(alive)
        if deliveries % 3 == 0:  # a third: twice, to two different instances
            second = rng.choice([n for n in alive if n != first])
            await cluster.send(event, first, second)
        else:
            await cluster.send(event, first)

    async def one(thread: int, round_: int, alive: list[int]) -> None:
        token = f"t{thread}-{round_}"
        if round_ == 0:
            event = _mention(cluster, f"tok:{token}")
            roots.append(event["ts"])
            expected[event["ts"]] = [token]
        else:
            root = roots[thread]
            event = _mention(cluster, f"tok:{token}", thread_ts=root)
            expected[root].append(token)
        await deliver(event, alive)
        ts = event["ts"] if round_ == 0 else roots[thread]
        await cluster.finished(token, ts, event["ts"])

    for round_ in range(per_thread):
        alive = [0, 1, 2] if round_ == 0 else [0, 1]
        if round_ == 0:
            for thread in range(threads):  # roots in a known order
                await one(thread, 0, alive)
        else:
            await asyncio.gather(*(one(thread, round_, alive) for thread in range(threads)))
        if round_ == 0:
            cluster.instances[victim].process.kill()  # SIGKILL, mid-answer (in `hold`)
            await cluster.instances[victim].process.wait()

    # A survivor takes the dead instance's conversation over: announced once, then the
    # thread goes on normally.
    await cluster.wait(lambda: cluster.interruptions(held_ts) >= 1)
    follow = _mention(cluster, "tok:held-1", thread_ts=held_ts)
    await deliver(follow, [0, 1])
    await cluster.finished("held-1", held_ts, follow["ts"])

    for root, tokens in expected.items():
        assert cluster.answers(root) == tokens, f"thread {root}"
    assert cluster.answers(held_ts) == ["held-1"]  # the killed one was not answered twice
    assert cluster.interruptions(held_ts) == 1
    for root in expected:
        assert cluster.interruptions(root) == 0
    await cluster.runs_closed()  # every run closed (none left open by the kill or a takeover)
    assert len({event_id for _, event_id in cluster.sent}) < len(cluster.sent)  # duplicates sent


async def test_300_mentions_over_100_threads_with_duplicates_and_a_killed_instance(
    cluster: Cluster,
) -> None:
    # About 15 s of traffic; starting and stopping three processes costs as much again.
    await _many_threads(cluster, threads=100, per_thread=3)


async def test_steering_and_stop_reach_the_instance_running_the_conversation(
    cluster: Cluster,
) -> None:
    # Steering: the run is on instance 0 (held in a tool), the message arrives at instance 1.
    first = _mention(cluster, "tok:s-0 hold:steer")
    root = first["ts"]
    await cluster.send(first, 0)
    await cluster.wait(lambda: "Hold" in json.dumps(cluster.fake.bot_replies(CHANNEL, root)))
    steer = _mention(cluster, "tok:s-1", thread_ts=root)
    await cluster.send(steer, 1)
    # Instance 1 accepted it and found the conversation running elsewhere: 👀 on it, quietly.
    await cluster.wait(lambda: "eyes" in cluster.fake.reactions(CHANNEL, steer["ts"]))
    cluster.open_gate("steer")
    await cluster.wait(lambda: "s-1" in cluster.answers(root))
    assert cluster.answers(root) == ["s-0", "s-1"]  # each once, in order, nothing lost

    # Stop: the run is on instance 0, `@teammate stop` arrives at instance 2.
    held = _mention(cluster, "tok:p-0 hold:stop-never")
    await cluster.send(held, 0)
    await cluster.wait(lambda: "Hold" in json.dumps(cluster.fake.bot_replies(CHANNEL, held["ts"])))
    await cluster.send(_mention(cluster, "stop", thread_ts=held["ts"]), 2)
    await cluster.wait(lambda: STOPPED_REACTION in cluster.fake.reactions(CHANNEL, held["ts"]))
    await cluster.runs_closed()  # closed, not left open: the stop ended the run
    assert cluster.answers(held["ts"]) == []


async def test_an_instance_sigstopped_in_a_tool_past_its_lease_lands_nothing_after_sigcont(
    cluster: Cluster,
) -> None:
    # Issue 24, R3, with a real pause: instance 0 is SIGSTOPped inside a tool call for longer
    # than its lease (1 s); instance 1 takes the conversation over, announces the interruption
    # and answers the next message. Then the tool's gate opens and instance 0 is resumed:
    # without fencing it finished the tool, asked the model, appended `re tok:z-0` after the
    # survivor's answer and showed it, done, in a thread already told it was interrupted.
    first = _mention(cluster, "tok:z-0 hold:paused")
    root = first["ts"]
    await cluster.send(first, 0)
    await cluster.wait(lambda: "Hold" in json.dumps(cluster.fake.bot_replies(CHANNEL, root)))
    paused = cluster.instances[0].process
    paused.send_signal(signal.SIGSTOP)
    try:
        await cluster.wait(lambda: cluster.interruptions(root) >= 1)
        follow = _mention(cluster, "tok:z-1", thread_ts=root)
        await cluster.send(follow, 1)
        await cluster.finished("z-1", root, follow["ts"])
        shown = json.dumps(cluster.fake.bot_replies(CHANNEL, root), sort_keys=True)
        reactions = sorted(cluster.fake.reactions(CHANNEL, root))
        cluster.open_gate("paused")  # the tool call returns as soon as instance 0 runs again
    finally:
        paused.send_signal(signal.SIGCONT)

    # Instance 0 is awake and working (it answers a new thread), and has had time to act on
    # the run it was paused in: a hold polls its gate every 20 ms, its lease renewal runs at
    # least every TTL/3.
    probe = _mention(cluster, "tok:z-probe")
    await cluster.send(probe, 0)
    await cluster.finished("z-probe", probe["ts"], probe["ts"])
    await asyncio.sleep(2.0)  # a window for anything late to show (nothing may)

    assert json.dumps(cluster.fake.bot_replies(CHANNEL, root), sort_keys=True) == shown
    assert sorted(cluster.fake.reactions(CHANNEL, root)) == reactions
    assert cluster.answers(root) == ["z-1"] and cluster.interruptions(root) == 1
    conversation = await cluster.store.get_conversation(
        f"slack:{cluster.fake.team_id}:{CHANNEL}:{root}"
    )
    assert conversation is not None
    stored = json.dumps(
        [s.message.text() for s in (await cluster.store.load(conversation.id)).messages]
    )
    assert "re tok:z-0" not in stored and "re tok:z-1" in stored
    await cluster.runs_closed()
