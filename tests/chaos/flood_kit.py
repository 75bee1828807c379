"""The flood of issue 13: many events over many Slack threads, some delivered twice, into the
assembled Slack app in HTTP mode (signed requests, the real bolt app, runner, SQLite store)
with an echo model, then a check of what people saw.

Each thread's messages are sent in order (each after the previous one was acknowledged, as
Slack does for one thread); threads go in parallel, paced to spread `events` over `seconds`.
A tenth of the messages is delivered twice: Slack's retry of the same event, or the same post
as both `app_mention` and `message`. An event the app does not acknowledge with a 2xx is sent
again, as Slack does (up to three times); `flood_not_acknowledged` counts those answers. The
model answers `re tok:<id>` for every `tok:<id>` said since it last spoke, so every answer
names the messages it answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bots.platforms.slack.app import SLACK_RULES, SlackBot
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import AssistantMessage, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.chaos.fault_kit import SIGNING_SECRET, fake_slack
from tests.fakes.slack_server import FakeSlack, signed_request

log = logging.getLogger(__name__)
SLACK_RETRIES = 3
TOKEN = re.compile(r"tok:(\d+-\d+)")
ANSWERED = re.compile(r"re tok:(\d+-\d+)")


def echo(request: ModelRequest) -> Reply:
    said: list[str] = []
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage) and message.text().strip():
            break
        if isinstance(message, UserMessage):
            said = TOKEN.findall(message.text()) + said
    return Reply(text=" ".join(f"re tok:{t}" for t in said) or "nothing new")


@dataclass
class FloodResult:
    sent: int  # distinct messages
    deliveries: int  # events delivered, repeats included
    answered_once: int
    missing: int
    lost_after_ack: int  # missing although the app acknowledged it: must be 0
    duplicated: int
    out_of_order_threads: int  # answered in another order than accepted
    reordered_threads: int  # accepted in another order than sent (the ack comes first)
    seconds: float
    peak_rss_mb: float
    statuses: dict[int, int] = field(default_factory=dict)

    def figures(self) -> dict[str, float]:
        return {
            "flood_sent": float(self.sent),
            "flood_deliveries": float(self.deliveries),
            "flood_answered_once": float(self.answered_once),
            "flood_missing": float(self.missing),
            "flood_lost_after_ack": float(self.lost_after_ack),
            "flood_duplicated": float(self.duplicated),
            "flood_out_of_order_threads": float(self.out_of_order_threads),
            "flood_reordered_threads": float(self.reordered_threads),
            "flood_not_acknowledged": float(sum(n for s, n in self.statuses.items() if s != 200)),
            "flood_seconds": round(self.seconds, 2),
            "flood_peak_rss_mb": round(self.peak_rss_mb, 1),
        }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@asynccontextmanager
async def _app(
    slack: FakeSlack, data_dir: Path
) -> AsyncIterator[tuple[SlackBot, ConversationRunner, int]]:
    settings = Settings(
        data_dir=data_dir,
        model="scripted",
        slack_bot_token=slack.bot_token,
        slack_signing_secret=SIGNING_SECRET,
        slack_api_url=slack.api_url,
    )
    bot = SlackBot(settings)
    store = await SqliteStore.open(settings.database_path)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _id: ScriptedModel(default=echo, record=False),
        toolset_factory=lambda _channel: [],
        platform_rules=SLACK_RULES,
        surfaces=bot.surfaces,
    )
    try:
        await bot.start(runner)
        await runner.recover()
        port = await bot.listen_http("127.0.0.1", 0)
        yield bot, runner, port
    finally:
        await bot.shutdown(grace_s=5.0)
        await runner.close()
        await store.close()


async def flood(
    data_dir: Path, *, threads: int, per_thread: int, seconds: float, channels: int = 10
) -> FloodResult:
    """Send `threads * per_thread` messages over `seconds`; answer and check them all."""
    async with fake_slack() as slack, _app(slack, data_dir) as (bot, runner, port):
        for n in range(50):
            slack.add_user(f"U{n:04d}", f"person{n}")
        url = f"http://127.0.0.1:{port}/slack/events"
        statuses: dict[int, int] = {}
        deliveries = 0
        roots: dict[int, tuple[str, str]] = {}  # thread -> (channel, root ts)
        acknowledged: set[str] = set()  # messages the app acknowledged at least once
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def deliver(payload: dict[str, Any], retry: int | None = None) -> bool:
                """One delivery as Slack makes it: an event not acknowledged with a 2xx is
                sent again (Slack retries three times, at once, after 1 and 5 minutes; here
                after 1, 4 and 16 s)."""
                nonlocal deliveries
                deliveries += 1
                for attempt in range(SLACK_RETRIES + 1):
                    response = await signed_request(
                        url, payload, SIGNING_SECRET, retry_num=retry, session=session
                    )
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                    if response.status == 200:
                        return True
                    if attempt < SLACK_RETRIES:
                        await asyncio.sleep(4.0**attempt)
                        retry = (retry or 0) + 1
                return False

            async def one_thread(t: int) -> None:
                channel = f"C{t % channels:04d}"
                gap = seconds / per_thread
                await asyncio.sleep(gap * t / threads)  # threads start spread over one gap
                for m in range(per_thread):
                    text = f"<@{slack.bot_user_id}> message tok:{t}-{m}"
                    root = roots.get(t)
                    stored = slack.seed_message(
                        channel, text, user=f"U{t % 50:04d}", thread_ts=root and root[1]
                    )
                    if root is None:
                        roots[t] = (channel, stored["ts"])
                    event: dict[str, Any] = {
                        "type": "app_mention",
                        "user": stored["user"],
                        "text": text,
                        "ts": stored["ts"],
                        "channel": channel,
                        "event_ts": stored["ts"],
                        "team": slack.team_id,
                    }
                    if root is not None:
                        event["thread_ts"] = root[1]
                    payload = slack.event_callback(event)
                    if await deliver(payload):
                        acknowledged.add(f"{t}-{m}")
                    if (t * per_thread + m) % 10 == 3:  # Slack retries the same event
                        if await deliver(payload, retry=1):
                            acknowledged.add(f"{t}-{m}")
                    elif (t * per_thread + m) % 10 == 7:  # the same post as `message`
                        twin = event | {"type": "message", "channel_type": "channel"}
                        if await deliver(slack.event_callback(twin)):
                            acknowledged.add(f"{t}-{m}")
                    await asyncio.sleep(gap)

            started = time.monotonic()
            await asyncio.gather(*(one_thread(t) for t in range(threads)))
        await bot.drain()
        await asyncio.wait_for(runner.wait_all(), 600)
        elapsed = time.monotonic() - started

        answered: dict[str, int] = {}
        out_of_order = reordered = 0
        for t, (channel, root_ts) in roots.items():
            seen = [
                token
                for reply in slack.bot_replies(channel, root_ts)
                for token in _answered_in(reply)
            ]
            for token in seen:
                answered[token] = answered.get(token, 0) + 1
            # Slack does not promise to deliver one thread's events in order, and the app
            # acknowledges before it accepts: the order kept is the order accepted.
            accepted = await _accepted_order(runner, f"slack:{slack.team_id}:{channel}:{root_ts}")
            if [token for token in seen if token in accepted] != [
                token for token in accepted if token in seen
            ]:
                out_of_order += 1
                log.warning("thread %s answered %s, accepted %s", t, seen, accepted)
            sent_order = [int(token.split("-")[1]) for token in accepted]
            if sent_order != sorted(sent_order):
                reordered += 1
        expected = {f"{t}-{m}" for t in range(threads) for m in range(per_thread)}
        return FloodResult(
            sent=len(expected),
            deliveries=deliveries,
            answered_once=sum(1 for token in expected if answered.get(token) == 1),
            missing=sum(1 for token in expected if token not in answered),
            lost_after_ack=sum(
                1 for token in expected if token not in answered and token in acknowledged
            ),
            duplicated=sum(1 for token in expected if answered.get(token, 0) > 1),
            out_of_order_threads=out_of_order,
            reordered_threads=reordered,
            seconds=elapsed,
            peak_rss_mb=peak_rss_mb(),
            statuses=statuses,
        )


async def _accepted_order(runner: ConversationRunner, key: str) -> list[str]:
    conversation = await runner.store.get_conversation(key)
    if conversation is None:
        return []
    loaded = await runner.store.load(conversation.id)
    return [
        token
        for stored in loaded.messages
        if isinstance(stored.message, UserMessage)
        for token in TOKEN.findall(stored.message.text())
    ]


def _answered_in(reply: dict[str, Any]) -> list[str]:
    """The tokens a bot message answers as people see it: its blocks when they carry the
    answer, else its text (a message with both repeats the answer in the text only as the
    notification's fallback: not an answer given twice)."""
    shown = ANSWERED.findall(json.dumps(reply.get("blocks"), ensure_ascii=False))
    return shown or ANSWERED.findall(str(reply.get("text") or ""))
