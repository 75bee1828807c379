"""How fast Teammate's Slack app acknowledges events, beside a bare bolt app that only acks.

Both apps run in HTTP mode in their own process, the way they run in production: Teammate is
the real `teammate slack --http` (scripted model, zero latency, a real SQLite store), talking to
a fake Slack Web API (`tests/fakes/slack_server.py`) in this process; the bare app is slack-bolt's
`AsyncApp` with one listener that does nothing (bolt acknowledges the event). This process signs
the events; a third process sends each burst, so that the fake's work is not in the timing.

Measured:
- a burst of N signed `app_mention` events (each a new thread, over 100 keep-alive connections,
  all sent at once), per app: p50 and p99 of the time from sending an event to its HTTP
  acknowledgement, and the ratio Teammate / bare bolt; rounds alternate between the apps and
  the median of the rounds is reported. Teammate answers every event of its burst (its work
  after the acknowledgement competes with the acknowledgements: that is the point).
- single events, one at a time: the time from sending the event to the first message of the
  answer visible in the thread at the fake Slack (median), and the Web API calls per answer:
  the message calls (`chat.*`: posts, updates, streams; Slack's per-channel rate limit and the
  target are about these) and every call (reactions, the status line and names included).
- the same per answer over the bursts, by method, and how many calls got a 429.
- an unsigned flood beside a genuine burst (Teammate only, `--flood-events 200`): 10 unsigned
  4 MiB bodies in parallel and 100 malformed ones (a wrong signature on an event, unsigned
  garbage JSON, `payload=` of 256 KiB of nested `[` with a bogus signature) sent at once,
  then, 20 ms into it, 200 signed `app_mention` events at once (new threads, answered).
  The worst stall of Teammate's event loop is measured from outside (no probe in the
  product): a probe, a signed `url_verification` request (bolt answers it on the gate's path,
  with no journal and no work after it) on a connection of its own, is sent every 10 ms from
  0.5 s before the flood until it is all answered. Its latency beyond its median before the
  flood is time the loop was not free for a new request, so the worst excess bounds the
  longest stall from above (a stall starting up to 10 ms before a probe is sent is seen
  shortened by up to 10 ms). Beside 200 signed events that excess also counts the probe's
  wait behind their 200 acks (the loop busy, not stalled), so the flood is sent twice: alone
  (`unsigned_flood_worst_stall_ms`: what the hostile bodies do to the loop), then with the
  signed burst (`ack_p99_ms_under_unsigned_flood`, and the probe's worst delay then,
  `flood_and_burst_worst_probe_delay_ms`). Sent from one sender process, as the bursts are;
  the probes from a process of their own (the sender is busy writing 40 MiB meanwhile).

Run: `uv run python -m benchmarks.slack_ack` or `uv run python benchmarks/slack_ack.py`
[--events 500] [--rounds 3] [--singles 20] [--flood-events 200]. Prints the conditions, a
table, and last one JSON line with `ack_p50_ms`, `ack_p99_ms`, `bolt_ack_p50_ms`,
`bolt_ack_p99_ms`, `ack_p99_ratio`, `first_post_ms`, `calls_per_answer` (message calls),
`all_calls_per_answer`, `burst_calls_per_answer`, `burst_all_calls_per_answer`, `answered`,
`sent`, `rate_limited`,
`unsigned_flood_worst_stall_ms`, `ack_p99_ms_under_unsigned_flood` (and the flood's details:
`ack_p50_ms_under_unsigned_flood`, `flood_and_burst_worst_probe_delay_ms`,
`flood_probe_baseline_ms`, `flood_probes`, `flood_answered`, `flood_refused`).
Targets: ack p99 within 1.5x of bare bolt; first post under 100 ms; calls per answer at most
3 + 1 per second of streaming (a zero-latency answer streams for well under a second: 3);
worst stall under the flood at most 50 ms.
A measurement, not a test: CI does not run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/slack_ack.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.fakes.slack_server import FakeSlack, sign

ROOT = Path(__file__).resolve().parent.parent
SECRET = "benchmark-signing-secret"
CONNECTIONS = 100
CHANNELS = 50  # events spread over channels, as in a workspace
USERS = 20
ANSWER_TEXT = "scripted model"  # what the scripted model's default reply contains
FINAL_REACTIONS = {"white_check_mark", "x", "black_square_for_stop"}
DEADLINE_S = 300.0  # a hang guard, not a target
_PORT_LINE = re.compile(r"(?:HTTP mode on [^:]+:|^PORT )(\d+)")


# -- the bare bolt app (a child process) -----------------------------------------------------


async def bare_bolt(api_url: str) -> None:
    """A slack-bolt AsyncApp that only acknowledges, served like Teammate's (aiohttp, the
    same adapter functions); prints `PORT n`, runs until SIGTERM."""
    from aiohttp import web
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token="xoxb-test-bot-token", base_url=api_url)
    app = AsyncApp(client=client, signing_secret=SECRET)  # auth.test once, on the warm-up

    @app.event("app_mention")
    async def on_mention() -> None:
        return None

    async def events(request: web.Request) -> web.Response:
        bolt_response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    web_app = web.Application()
    web_app.router.add_post("/slack/events", events)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    print(f"PORT {sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


# -- the two apps as child processes ---------------------------------------------------------


@dataclass
class Target:
    name: str
    process: asyncio.subprocess.Process
    port: int
    _drain: asyncio.Task[None]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.process.wait(), 60)
        self._drain.cancel()


async def start_target(name: str, command: list[str], env: dict[str, str], cwd: str) -> Target:
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        if not line:
            raise RuntimeError(f"{name} exited before listening:\n{''.join(seen)}")
        seen.append(line)
        match = _PORT_LINE.search(line)
        if match:
            break

    async def drain() -> None:  # never let the child block on a full pipe
        assert process.stdout is not None
        while await process.stdout.readline():
            pass

    return Target(name, process, int(match.group(1)), asyncio.create_task(drain()))


def child_env(fake: FakeSlack, data_dir: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ANTHROPIC_", "TEAMMATE_", "SLACK_", "DISCORD_"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        TEAMMATE_DATA_DIR=data_dir,
        TEAMMATE_MODEL="scripted",
        SLACK_BOT_TOKEN=fake.bot_token,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=fake.api_url,
    )
    return env


# -- events ------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Prepared:
    channel: str
    ts: str
    body: bytes
    headers: dict[str, str]


def prepare(fake: FakeSlack, n: int, tag: str) -> list[Prepared]:
    """N mentions, each a new thread, stored in the fake (as Slack would have them) and signed
    ahead of time, so signing is not in the measurement."""
    prepared = []
    stamp = int(time.time())
    for i in range(n):
        channel = f"C{tag}{i % CHANNELS:03d}"
        user = f"U{i % USERS:04d}"
        text = f"<@{fake.bot_user_id}> question {tag}-{i}"
        stored = fake.seed_message(channel, text, user=user)
        event = {
            "type": "app_mention",
            "user": user,
            "text": text,
            "ts": stored["ts"],
            "channel": channel,
            "event_ts": stored["ts"],
        }
        body = json.dumps(fake.event_callback(event, event_id=f"Ev{tag}{i:06d}"))
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": str(stamp),
            "X-Slack-Signature": sign(body, SECRET, stamp),
        }
        prepared.append(Prepared(channel, str(stored["ts"]), body.encode(), headers))
    return prepared


async def post(session: aiohttp.ClientSession, url: str, event: Prepared) -> float:
    """Send one event; the milliseconds until its acknowledgement was read."""
    started = time.perf_counter()
    async with session.post(url, data=event.body, headers=event.headers) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}")
    return (time.perf_counter() - started) * 1000


def answered(fake: FakeSlack, event: Prepared) -> bool:
    """The answer is in the thread and finished: the final reaction (✅, or ❌/⏹) is the last
    thing an answer does, so every call it made has been counted by then."""
    if not FINAL_REACTIONS & set(fake.reactions(event.channel, event.ts)):
        return False
    return ANSWER_TEXT in json.dumps(fake.bot_replies(event.channel, event.ts))


async def wait_answered(fake: FakeSlack, events: list[Prepared]) -> int:
    """Wait until every event is answered (polling: checking 500 threads on every call the
    fake receives would cost more than the apps); how many were."""
    deadline = time.monotonic() + DEADLINE_S
    waiting = list(events)
    while waiting and time.monotonic() < deadline:
        waiting = [event for event in waiting if not answered(fake, event)]
        if waiting:
            await asyncio.sleep(0.05)
    return len(events) - len(waiting)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def bot_calls(fake: FakeSlack, since: int) -> list[Any]:
    return [call for call in fake.calls[since:] if call.method != "auth.test"]


# -- the measurements ------------------------------------------------------------------------


async def burst(
    fake: FakeSlack, target: Target, n: int, tag: str, *, answers: bool
) -> dict[str, Any]:
    (warm,) = prepare(fake, 1, tag + "w")
    events = prepare(fake, n, tag)
    first_call = len(fake.calls)
    latencies = await send_from_a_child(target.url, warm, events)
    result: dict[str, Any] = {
        "p50": statistics.median(latencies),
        "p99": percentile(list(latencies), 99),
    }
    if answers:
        # The warm-up event was answered too; its calls are counted, so it counts as an answer.
        result["answered"] = await wait_answered(fake, [warm, *events]) - 1
        result["answers_counted"] = result["answered"] + 1
        calls = bot_calls(fake, first_call)
        result["calls"] = Counter(call.method for call in calls)
        result["rate_limited"] = sum(1 for call in calls if call.status == 429)
    return result


async def send_from_a_child(url: str, warm: Prepared, events: list[Prepared]) -> list[float]:
    """Send the burst from a process of its own, so that neither the sender's work nor the
    fake Slack's (answering the app's calls, in this process) is inside the measurement."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump([{"body": e.body.decode(), "headers": e.headers} for e in [warm, *events]], file)
    try:
        out = await run_sender("--send", url, file.name)
    finally:
        os.unlink(file.name)
    latencies: list[float] = json.loads(out)
    return latencies


async def run_sender(mode: str, url: str, path: str) -> str:
    """Run this module as a sender (`--send`, `--flood`); its last line of output."""
    sender = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.slack_ack",
        mode,
        url,
        path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(sender.communicate(), DEADLINE_S)
    if sender.returncode != 0:
        raise RuntimeError(f"the sender failed ({sender.returncode})")
    return out.decode().strip().splitlines()[-1]


async def send(url: str, loaded: list[dict[str, Any]]) -> None:
    """The sender (a child process): the first event alone (connections warm, the app's first
    request done), then the rest at once over `CONNECTIONS` keep-alive connections; prints the
    burst's latencies in ms as one JSON list."""
    events = [Prepared("", "", e["body"].encode(), e["headers"]) for e in loaded]
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        await post(session, url, events[0])
        await asyncio.sleep(1.0)  # the warm-up event's answer is done before the burst
        latencies = await asyncio.gather(*(post(session, url, e) for e in events[1:]))
    print(json.dumps([round(latency, 3) for latency in latencies]))


FLOOD_BIG = 10  # unsigned 4 MiB bodies, in parallel
FLOOD_MALFORMED = 100
PROBE_EVERY_S = 0.010
PROBE_BASELINE_S = 0.5


def flood_requests(fake: FakeSlack, n: int) -> dict[str, Any]:
    """The flood's requests, made ahead (signed where signed): the signed events, probes,
    and the hostile bodies (as text, with their headers)."""
    events = prepare(fake, n + 1, "f")  # the first warms the connections up
    stamp = int(time.time())

    def signed(body: str) -> dict[str, Any]:
        return {
            "body": body,
            "headers": {
                "Content-Type": "application/json",
                "X-Slack-Request-Timestamp": str(stamp),
                "X-Slack-Signature": sign(body, SECRET, stamp),
            },
        }

    challenge = json.dumps({"type": "url_verification", "token": "x", "challenge": "probe"})
    bogus = {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": "v0=" + "0" * 64}
    malformed: list[dict[str, Any]] = []
    for i in range(FLOOD_MALFORMED):
        if i % 3 == 0:  # an event, signed with another secret
            body = events[i % n].body.decode()
            headers = {"Content-Type": "application/json"} | bogus
        elif i % 3 == 1:  # garbage JSON, unsigned
            body = '{"type": "event_callback", "event": {[[[' + "x" * 1000
            headers = {"Content-Type": "application/json"}
        else:  # payload= of nested brackets, a bogus signature
            body = "payload=" + "%5B" * (256 * 1024 // 3)
            headers = {"Content-Type": "application/x-www-form-urlencoded"} | bogus
        malformed.append({"body": body, "headers": headers})
    return {
        "events": [{"body": e.body.decode(), "headers": e.headers} for e in events],
        "probe": signed(challenge),
        "malformed": malformed,
    }


async def flood(fake: FakeSlack, target: Target, n: int) -> dict[str, Any]:
    requests = flood_requests(fake, n)
    events = prepare_known(fake, requests["events"])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(requests, file)
    try:
        out = await run_sender("--flood", target.url, file.name)
    finally:
        os.unlink(file.name)
    result: dict[str, Any] = json.loads(out)
    result["answered"] = await wait_answered(fake, events) - 1  # not the warm-up event
    return result


def prepare_known(fake: FakeSlack, loaded: list[dict[str, Any]]) -> list[Prepared]:
    """The flood's signed events as `Prepared`, to wait for their answers."""
    prepared = []
    for item in loaded:
        event = json.loads(item["body"])["event"]
        prepared.append(Prepared(event["channel"], event["ts"], b"", {}))
    return prepared


async def send_flood(url: str, loaded: dict[str, Any]) -> None:
    """The flood's sender (a child process), in two phases: the flood alone, then the flood
    with the signed burst. Each: probes from `PROBE_BASELINE_S` before it, then the hostile
    bodies at once (and the signed events, 20 ms later, at once), the probes going on until
    all of it is answered. Prints one JSON object."""
    events = [Prepared("", "", e["body"].encode(), e["headers"]) for e in loaded["events"]]
    refused: Counter[str] = Counter()
    big = b"a=" + b"x" * (4 * 1024 * 1024 - 2)
    big_headers = {"Content-Type": "application/x-www-form-urlencoded"}

    async def hostile(session: aiohttp.ClientSession, body: bytes, headers: Any) -> None:
        try:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                refused[str(response.status)] += 1
        except aiohttp.ClientError as exc:  # the server may close on a body it refused
            refused[type(exc).__name__] += 1

    async def phase(signed: list[Prepared], session: aiohttp.ClientSession) -> dict[str, Any]:
        # The prober is a process of its own: this one is busy writing 40 MiB meanwhile.
        prober = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.slack_ack",
            "--probe",
            url,
            json.dumps(loaded["probe"]),
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert prober.stdout is not None and prober.stdin is not None
        await prober.stdout.readline()  # probing
        await asyncio.sleep(PROBE_BASELINE_S)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0)
        ) as hostile_session:
            flood_started = time.perf_counter()
            attack = [hostile(hostile_session, big, big_headers) for _ in range(FLOOD_BIG)]
            attack += [
                hostile(hostile_session, m["body"].encode(), m["headers"])
                for m in loaded["malformed"]
            ]
            attacking = asyncio.gather(*attack)
            await asyncio.sleep(0.02)  # the flood is in flight
            latencies = await asyncio.gather(*(post(session, url, e) for e in signed))
            await attacking
        out, _ = await asyncio.wait_for(prober.communicate(b"stop\n"), DEADLINE_S)
        probes = json.loads(out.decode().strip().splitlines()[-1])
        base = statistics.median(ms for at, ms in probes if at < flood_started)
        during = [ms for at, ms in probes if at >= flood_started]
        return {
            "p99": percentile(latencies, 99) if latencies else None,
            "p50": statistics.median(latencies) if latencies else None,
            "probe_baseline_ms": round(base, 3),
            "probes": len(during),
            "worst_stall_ms": round(max(0.0, max(during) - base), 3),
        }

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS)) as session:
        await post(session, url, events[0])  # warm: connections open, first request done
        await asyncio.sleep(1.0)
        alone = await phase([], session)
        await asyncio.sleep(1.0)
        beside = await phase(events[1:], session)
    print(json.dumps({"alone": alone, "beside": beside, "refused": dict(refused)}))


async def probe(url: str, request: dict[str, Any]) -> None:
    """The prober (a child process): the signed probe every `PROBE_EVERY_S` on a connection
    of its own until a line comes on stdin (the last probe is then finished); prints
    `probing` first and last one JSON list of [sent at (perf_counter, the system's monotonic
    clock: comparable with the sender's), ms]."""
    body, headers = request["body"].encode(), request["headers"]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    probes: list[tuple[float, float]] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        async with session.post(url, data=body, headers=headers) as warm:
            await warm.read()
        print("probing", flush=True)
        next_at = time.perf_counter()
        while not stop.is_set():
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as got:
                await got.read()
                if got.status != 200:
                    raise RuntimeError(f"a probe got {got.status}")
            probes.append((started, round((time.perf_counter() - started) * 1000, 3)))
            next_at = max(next_at + PROBE_EVERY_S, time.perf_counter())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), next_at - time.perf_counter())
    print(json.dumps(probes))


async def singles(
    fake: FakeSlack, target: Target, n: int
) -> tuple[list[float], list[Counter[str]]]:
    """One event at a time: ms to the first visible message of the answer, and the Web API
    calls each answer made, by method."""
    first_posts: list[float] = []
    calls: list[Counter[str]] = []
    async with aiohttp.ClientSession() as session:
        for i in range(n + 1):  # the first warms up (names cached, connections open)
            (event,) = prepare(fake, 1, f"s{i}")
            first_call = len(fake.calls)
            sent = time.perf_counter()
            await post(session, target.url, event)
            await fake.wait_for(shown(event), DEADLINE_S)
            visible = time.perf_counter()
            await wait_answered(fake, [event])
            if i > 0:
                first_posts.append((visible - sent) * 1000)
                calls.append(Counter(call.method for call in bot_calls(fake, first_call)))
    return first_posts, calls


def shown(event: Prepared) -> Callable[[FakeSlack], bool]:
    def check(fake: FakeSlack) -> bool:
        return bool(fake.bot_replies(event.channel, event.ts))

    return check


async def run(args: argparse.Namespace, print_: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="teammate-slack-bench-") as directory:
        async with FakeSlack() as fake:
            for user in range(USERS):
                fake.add_user(f"U{user:04d}", f"person{user}")
            env = child_env(fake, str(Path(directory) / "data"))
            python = [sys.executable]
            teammate = await start_target(
                "teammate",
                [
                    *python,
                    "-m",
                    "bots.cli",
                    "slack",
                    "--http",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                ],
                env,
                directory,
            )
            bolt = await start_target(
                "bolt",
                [*python, "-m", "benchmarks.slack_ack", "--bare-bolt", fake.api_url],
                env,
                directory,
            )
            try:
                first_posts, single_calls = await singles(fake, teammate, args.singles)
                ours: list[dict[str, Any]] = []
                bare: list[dict[str, Any]] = []
                for round_ in range(args.rounds):
                    bare.append(await burst(fake, bolt, args.events, f"b{round_}", answers=False))
                    ours.append(
                        await burst(fake, teammate, args.events, f"t{round_}", answers=True)
                    )
                flooded = (
                    await flood(fake, teammate, args.flood_events) if args.flood_events else None
                )
            finally:
                await teammate.stop()
                await bolt.stop()

    def median_of(results: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(result[key] for result in results))

    calls: Counter[str] = Counter()
    for result in ours:
        calls.update(result["calls"])
    answered_total = sum(result["answered"] for result in ours)
    counted = sum(result["answers_counted"] for result in ours)
    figures = {
        "events": args.events,
        "rounds": args.rounds,
        "ack_p50_ms": round(median_of(ours, "p50"), 2),
        "ack_p99_ms": round(median_of(ours, "p99"), 2),
        "bolt_ack_p50_ms": round(median_of(bare, "p50"), 2),
        "bolt_ack_p99_ms": round(median_of(bare, "p99"), 2),
        "first_post_ms": round(statistics.median(first_posts), 2) if first_posts else None,
        "calls_per_answer": median_calls(single_calls, writes_only=True),
        "all_calls_per_answer": median_calls(single_calls, writes_only=False),
        "burst_calls_per_answer": round(writes(calls) / max(1, counted), 2),
        "burst_all_calls_per_answer": round(sum(calls.values()) / max(1, counted), 2),
        "answered": answered_total,
        "sent": args.events * args.rounds,
        "rate_limited": sum(result["rate_limited"] for result in ours),
    }
    if flooded is not None:
        alone, beside = flooded["alone"], flooded["beside"]
        figures |= {
            "unsigned_flood_worst_stall_ms": alone["worst_stall_ms"],
            "ack_p99_ms_under_unsigned_flood": round(beside["p99"], 2),
            "ack_p50_ms_under_unsigned_flood": round(beside["p50"], 2),
            "flood_and_burst_worst_probe_delay_ms": beside["worst_stall_ms"],
            "flood_probe_baseline_ms": alone["probe_baseline_ms"],
            "flood_probes": [alone["probes"], beside["probes"]],
            "flood_answered": flooded["answered"],
            "flood_refused": flooded["refused"],
        }
    figures["ack_p99_ratio"] = round(
        figures["ack_p99_ms"] / max(figures["bolt_ack_p99_ms"], 1e-9), 2
    )
    print_("")
    print_(f"{'':<28}{'Teammate':>12}{'bare bolt':>12}{'ratio':>9}")
    for label, ours_key, bolt_key in (
        ("ack p50 (ms)", "ack_p50_ms", "bolt_ack_p50_ms"),
        ("ack p99 (ms)", "ack_p99_ms", "bolt_ack_p99_ms"),
    ):
        ratio = figures[ours_key] / max(figures[bolt_key], 1e-9)
        print_(f"{label:<28}{figures[ours_key]:>12.1f}{figures[bolt_key]:>12.1f}{ratio:>8.2f}x")
    for round_, (mine, theirs) in enumerate(zip(ours, bare, strict=True)):
        print_(
            f"{'  round ' + str(round_ + 1) + ' p99 (ms)':<28}{mine['p99']:>12.1f}"
            f"{theirs['p99']:>12.1f}"
        )
    print_("")
    print_(
        f"first visible post, single event (median of {len(first_posts)}): "
        f"{figures['first_post_ms']} ms (target < 100 ms)"
    )
    print_(
        f"message calls (chat.*) per answer, single events (median): "
        f"{figures['calls_per_answer']} (target <= 3 + 1 per second of streaming); every "
        f"Web API call: {figures['all_calls_per_answer']}"
    )
    if single_calls:
        print_(f"  one answer's calls: {by_method(single_calls[-1])}")
    print_(
        f"answered in the bursts: {answered_total} of {figures['sent']}; message calls per "
        f"answer: {figures['burst_calls_per_answer']} (all: "
        f"{figures['burst_all_calls_per_answer']}); 429s: {figures['rate_limited']}"
    )
    print_(f"  the bursts' calls: {by_method(calls)}")
    print_(f"ack p99 ratio: {figures['ack_p99_ratio']}x (target <= 1.5x)")
    if flooded is not None:
        print_(
            f"unsigned flood ({FLOOD_BIG} x 4 MiB unsigned, {FLOOD_MALFORMED} malformed), probed "
            f"every 10 ms (baseline {alone['probe_baseline_ms']:.1f} ms): worst loop stall "
            f"{alone['worst_stall_ms']:.1f} ms (target <= 50; {alone['probes']} probes)"
        )
        print_(
            f"  the same flood with {args.flood_events} signed events 20 ms into it: their ack "
            f"p99 {beside['p99']:.1f} ms (p50 {beside['p50']:.1f}); a probe's worst delay "
            f"{beside['worst_stall_ms']:.1f} ms (queued behind the burst's acks too; "
            f"{beside['probes']} probes); answered {flooded['answered']} of "
            f"{args.flood_events}; refused {flooded['refused']}"
        )
    return figures


def writes(calls: Counter[str]) -> int:
    """The message writes (`chat.*`): what Slack's per-channel rate limit is about."""
    return sum(count for method, count in calls.items() if method.startswith("chat."))


def median_calls(per_answer: list[Counter[str]], *, writes_only: bool) -> float | None:
    if not per_answer:
        return None
    counts = [writes(c) if writes_only else sum(c.values()) for c in per_answer]
    return float(statistics.median(counts))


def by_method(calls: Counter[str]) -> str:
    return ", ".join(f"{method} {count}" for method, count in calls.most_common())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=500, help="events per burst (500)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per app, alternating (3)")
    parser.add_argument("--singles", type=int, default=20, help="single events timed (20)")
    parser.add_argument(
        "--flood-events", type=int, default=200, help="signed events in the flood (200; 0: none)"
    )
    parser.add_argument("--bare-bolt", metavar="API_URL", help=argparse.SUPPRESS)
    parser.add_argument("--send", nargs=2, metavar=("URL", "EVENTS"), help=argparse.SUPPRESS)
    parser.add_argument("--flood", nargs=2, metavar=("URL", "REQUESTS"), help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, metavar=("URL", "REQUEST"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_bolt:
        asyncio.run(bare_bolt(args.bare_bolt))
        return
    if args.probe:
        url, request = args.probe
        asyncio.run(probe(url, json.loads(request)))
        return
    if args.flood:
        url, path = args.flood
        asyncio.run(send_flood(url, json.loads(Path(path).read_text())))
        return
    if args.send:
        url, path = args.send
        asyncio.run(send(url, json.loads(Path(path).read_text())))
        return
    print(f"python {platform.python_version()} ({platform.python_implementation()})")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}")
    print(
        f"burst: {args.events} signed app_mention events (new threads, {CHANNELS} channels, "
        f"{USERS} people) over {CONNECTIONS} keep-alive connections from a sender process, "
        f"{args.rounds} rounds alternating between the apps; the fake Slack in this process"
    )
    print(
        "Teammate: `teammate slack --http` in its own process, scripted model (zero latency), "
        "SQLite store in a temp dir; bare bolt: AsyncApp with an empty app_mention listener"
    )
    figures = asyncio.run(run(args, print))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
