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

Run: `uv run python -m benchmarks.slack_ack` or `uv run python benchmarks/slack_ack.py`
[--events 500] [--rounds 3] [--singles 20]. Prints the conditions, a table, and last one JSON
line with `ack_p50_ms`, `ack_p99_ms`, `bolt_ack_p50_ms`, `bolt_ack_p99_ms`, `ack_p99_ratio`,
`first_post_ms`, `calls_per_answer` (message calls), `all_calls_per_answer`,
`burst_calls_per_answer`, `burst_all_calls_per_answer`, `answered`, `sent`, `rate_limited`.
Targets: ack p99 within 1.5x of bare bolt; first post under 100 ms; calls per answer at most
3 + 1 per second of streaming (a zero-latency answer streams for well under a second: 3).
A measurement, not a test: CI does not run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as `python benchmarks/slack_ack.py`: find the project's packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
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
        sender = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.slack_ack",
            "--send",
            url,
            file.name,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(sender.communicate(), DEADLINE_S)
    finally:
        os.unlink(file.name)
    if sender.returncode != 0:
        raise RuntimeError(f"the sender failed ({sender.returncode})")
    latencies: list[float] = json.loads(out.decode().strip().splitlines()[-1])
    return latencies


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
    parser.add_argument("--bare-bolt", metavar="API_URL", help=argparse.SUPPRESS)
    parser.add_argument("--send", nargs=2, metavar=("URL", "EVENTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_bolt:
        asyncio.run(bare_bolt(args.bare_bolt))
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
