"""Crash anywhere: SIGKILL the real `teammate slack --http` at a chosen moment of an answer,
restart it, and check what people and the store then see.

Owns: `crash_runs(backend, runs, seed)`, the one procedure behind the CI crash tests
(tests/chaos/test_crash_anywhere.py, a few runs) and `benchmarks/chaos.py` (50+ per backend).

Each run is one conversation in a channel of its own, asked by a person of its own:
1. a mention `tok:rN` goes to one instance (the victim). The fake model (`ChaosAnthropic`)
   answers it the way a real answer goes: a short streamed text and a `web_fetch` tool call
   (to `FetchSite`, a local page), then, once the tool result is in, a streamed final reply
   `re tok:rN ...`;
2. a seeded RNG picks the moment of the kill, one of `PHASES` (each once in every six runs),
   and the fakes SIGKILL the
   victim when they receive the matching call (no sleeps, no races): `accept` (the author's
   name is being looked up: acknowledged, not yet in the store), `stream` (after k events of
   the first model stream), `tool` (the page is being fetched), `between` (the model is asked
   again with the tool's result), `final_stream` (after k events of the final reply),
   `posting` (the n-th Web API write into the thread arrives, before or after the fake
   Slack carries it out). The phase actually hit is recorded from the call that fired;
3. like Slack, an event whose acknowledgement never arrived is delivered again after the
   restart (same event id). SQLite: the one process is restarted on its data directory.
   PostgreSQL: three instances share a database (leases of 10 s); the others take the killed
   one's conversation over, and the victim is restarted once the run has settled;
4. the run has settled when the thread shows the finished answer or the interruption
   notice; then a follow-up `tok:rN-next` goes to another (or the restarted) instance and
   must be answered normally.

A run whose kill never fired (the answer finished before its moment came) tested no crash:
it is counted as missed (not survived), and its live process is kept, never started a second
time on the same data directory. Every process the harness starts ends with it: stopped at
the end (killed if the stop fails or is cancelled), killed when a start fails, and killed by
the kernel if the harness itself is killed (`tools.parent_death`).

Checked per run: every user message is in the store's history (none lost), no answer is
shown twice, every tool call in history has its result (replayable), an answer not shown
complete is announced exactly once (and a complete one not at all), the follow-up is
answered exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web

from benchmarks.slack_ack import _PORT_LINE, SECRET, Target, child_env
from bots.recovery import INTERRUPTED_TEXT
from core.history import unanswered_tool_calls
from core.messages import UserMessage
from storage.base import ConversationStore
from tests.chaos.hooked_slack import Drop, HookedSlack
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    RecordedRequest,
    SSEReply,
    TextOut,
    ToolUseOut,
    error_reply,
    sse,
    validate_request,
)
from tests.fakes.local_site import local_site
from tests.fakes.slack_server import sign
from tools.parent_death import ends_with_parent

ROOT = Path(__file__).resolve().parents[2]
Backend = Literal["sqlite", "postgres"]
Phase = Literal["accept", "stream", "tool", "between", "final_stream", "posting"]
PHASES: tuple[Phase, ...] = ("accept", "stream", "tool", "between", "final_stream", "posting")
# The writes an answer makes into its thread, in about this order: the in-progress message
# (tool calls, Stop), the stream of the final text, its end, the in-progress message's update
# and the ✅. A `posting` kill lands at the first one of a chosen method, before or after
# Slack carries it out.
POSTING = (
    "chat.postMessage",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "chat.update",
    "reactions.add",
)
SLACK_RETRIES = 3  # Slack sends an unacknowledged event again this many times
SETTLE_S = 120.0  # a hang guard per wait, not a speed check
START_S = 300.0  # a process start (slow on a loaded machine), also a hang guard
LEASE_S = 10  # PostgreSQL: a dead instance's conversations are taken over after this (a loaded
# machine stalls a process for seconds: a shorter lease is lost by live instances too)
FINAL_WORDS = 24  # the final reply streams in ~this many events
TOKEN = re.compile(r"tok:(r\d+(?:-next)?)")


# -- the fake model ----------------------------------------------------------------------------


class ChaosAnthropic(FakeAnthropic):
    """Answers each request from what it asks (no queue): a user message `tok:X` gets a text
    and a `web_fetch` of `<site>/X`; a request ending in that tool's result gets the final
    `re tok:X`, streamed in small events (a follow-up `tok:X-next` gets it at once).
    `on_request(token, final)` runs when a request arrives, `on_event(token, final, index)`
    before each stream event is written."""

    def __init__(self, site: str) -> None:
        super().__init__()
        self.site = site
        self.on_request: Callable[[str, bool], None] | None = None
        self.on_event: Callable[[str, bool, int], None] | None = None
        self.event_delay_s = 0.01

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(RecordedRequest(request.method, request.path, {}, body))
        problem = validate_request(body)
        if problem is not None:
            return _json_error(400, problem)
        token, final = _what_is_asked(body)
        if token is None:
            return _json_error(400, "no tok: in the request")
        if self.on_request is not None:
            self.on_request(token, final)
        if final or token.endswith("-next"):  # a follow-up is answered at once, in words
            words = " ".join(f"w{n}" for n in range(FINAL_WORDS))
            reply = sse(TextOut(f"re tok:{token} {words}", chunk_size=6))
        else:
            url = json.dumps({"url": f"{self.site}/{token}"})
            reply = sse(
                TextOut("Let me look that up.", chunk_size=7),
                ToolUseOut(f"toolu_{token.replace('-', '_')}", "web_fetch", [url[:10], url[10:]]),
                stop_reason="tool_use",
            )
        return await self._stream_hooked(request, reply, token, final)

    async def _stream_hooked(
        self, request: web.Request, reply: SSEReply, token: str, final: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            for index, (event_type, data) in enumerate(reply.events):
                if self.on_event is not None:
                    self.on_event(token, final, index)
                await asyncio.sleep(self.event_delay_s)
                await response.write(f"event: {event_type}\ndata: {json.dumps(data)}\n\n".encode())
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.disconnects += 1
        return response


def _what_is_asked(body: dict[str, Any]) -> tuple[str | None, bool]:
    """(token, final?): the last user turn's `tok:` if it says one (a new question, maybe
    after an interrupted tool result), else the token of the tool call it answers."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = last.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    said = " ".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    found = TOKEN.findall(said)
    if found:
        return found[-1], False
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        call_id = str(results[-1].get("tool_use_id") or "")
        token = call_id.removeprefix("toolu_").replace("_", "-")
        return (token or None), True
    return None, False


def _json_error(status: int, message: str) -> web.Response:
    reply = error_reply(status, "invalid_request_error", message)
    return web.json_response(reply.body, status=reply.status)


# -- one kill, armed ---------------------------------------------------------------------------


@dataclass
class Trigger:
    """Where the next kill lands: the run's token, the phase, and a count within it."""

    token: str
    channel: str
    phase: Phase
    index: int  # stream event index
    method: str  # posting: the Web API method
    after: bool  # posting: after the fake carried the write out (else before)
    kill: Callable[[], None]
    hit: str | None = None  # what actually fired (the fake's call), once it has
    fired: asyncio.Event = field(default_factory=asyncio.Event)

    def fire(self, what: str) -> None:
        if self.hit is None:
            self.hit = what
            self.kill()
            self.fired.set()


# -- the instances ---------------------------------------------------------------------------


@dataclass
class Instance:
    data_dir: Path
    env: dict[str, str]
    target: Target | None = None

    @property
    def alive(self) -> bool:
        return self.target is not None and self.target.process.returncode is None

    @property
    def url(self) -> str:
        assert self.target is not None
        return self.target.url

    async def start(self) -> None:
        """Start `teammate slack --http`; returns once it listens (it printed its port). Never
        a second process on the data directory (that would test two live processes on one
        database, not a restart); a start that fails kills what it started."""
        if self.alive:
            raise RuntimeError(f"{self.data_dir.name} is running: a restart needs it dead")
        command = [sys.executable, "-m", "bots.cli", "slack", "--http"]
        command += ["--host", "127.0.0.1", "--port", "0"]
        process = await asyncio.create_subprocess_exec(
            *command,
            env=self.env,
            cwd=str(ROOT),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=ends_with_parent(),  # ends with the harness, even a killed one
        )
        try:
            port = await _listening_port(process)
        except BaseException:  # timed out, exited, or cancelled: nothing may be left running
            if process.returncode is None:
                process.kill()
            await asyncio.shield(process.wait())
            raise

        async def drain() -> None:  # never let the child block on a full pipe
            assert process.stdout is not None
            while await process.stdout.readline():
                pass

        self.target = Target("teammate", process, port, asyncio.create_task(drain()))

    def kill(self) -> None:
        if self.target is not None and self.target.process.returncode is None:
            os.kill(self.target.process.pid, signal.SIGKILL)

    async def reap(self) -> None:
        if self.target is not None:
            await self.target.process.wait()
            self.target._drain.cancel()

    async def stop(self) -> None:
        """SIGTERM and wait; killed if that times out, fails or is cancelled."""
        if self.target is None:
            return
        try:
            await self.target.stop()
        except TimeoutError:
            pass
        finally:
            self.kill()
        await self.reap()


async def _listening_port(process: asyncio.subprocess.Process) -> int:
    """The port `teammate slack --http` printed it listens on."""
    assert process.stdout is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), START_S)).decode()
        if not line:
            raise RuntimeError(f"teammate exited before listening:\n{''.join(seen)}")
        seen.append(line)
        match = _PORT_LINE.search(line)
        if match:
            return int(match.group(1))


# -- results ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    run: int
    backend: Backend
    phase: Phase
    hit: str | None  # the call that fired the kill (None: the answer finished first)
    missed: bool = False  # the answer finished before the kill's moment: no crash tested
    survived: bool = False
    lost: int = 0  # user messages not in the store's history
    duplicates: int = 0  # answers shown more than once (each extra showing counts)
    interrupted: bool = False  # the first answer was not shown complete
    announced: int = 0  # interruption notices in the thread
    replayable: bool = True
    follow_up_answered: bool = False
    problem: str = ""


@dataclass
class CrashReport:
    backend: Backend
    runs: list[RunResult]

    @property
    def survived(self) -> int:
        return sum(r.survived for r in self.runs)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.runs)

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.runs)

    @property
    def interrupted(self) -> int:
        return sum(r.interrupted for r in self.runs)

    @property
    def missed(self) -> int:
        return sum(r.missed for r in self.runs)

    @property
    def announced_once(self) -> int:
        return sum(r.interrupted and r.announced == 1 for r in self.runs)

    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.runs:
            counts[r.phase if r.hit else f"{r.phase} (missed)"] = (
                counts.get(r.phase if r.hit else f"{r.phase} (missed)", 0) + 1
            )
        return counts


# -- the procedure ---------------------------------------------------------------------------


class CrashRig:
    """The fakes, the instances and the store the checks read."""

    def __init__(
        self,
        backend: Backend,
        directory: Path,
        slack: HookedSlack,
        model: ChaosAnthropic,
        site: str,
        database_url: str | None,
    ) -> None:
        self.backend = backend
        self.slack = slack
        self.model = model
        self.trigger: Trigger | None = None
        self.fetches: list[str] = []
        self._restarting: asyncio.Future[None] | None = None
        self._phases: list[Phase] = []
        self.phase: Phase = PHASES[0]  # the current run's
        self.plan: list[Phase] | None = None  # the phases in this order (else seeded)
        self.posting: tuple[str, bool] | None = None  # (method, after) for every posting kill
        count = 3 if backend == "postgres" else 1
        self.instances = []
        for n in range(count):
            env = child_env(slack, str(directory / f"instance{n}"))
            env.update(
                TEAMMATE_MODEL="claude-sonnet-5-5",
                TEAMMATE_THINKING="off",
                ANTHROPIC_API_KEY="sk-ant-chaos-fake-key",
                ANTHROPIC_BASE_URL=model.url,
                TEAMMATE_TOOLS__WEB_FETCH__ALLOW_HOSTS=json.dumps([site.removeprefix("http://")]),
                TEAMMATE_INSTANCE_LEASE_S=str(LEASE_S),
            )
            if database_url is not None:
                env["TEAMMATE_DATABASE_URL"] = database_url
            self.instances.append(Instance(directory / f"instance{n}", env))
        slack.before = self._slack_before
        slack.after = self._slack_after
        model.on_request = self._model_request
        model.on_event = self._model_event

    # the hooks: each fires the armed trigger when its call is the chosen moment

    async def _slack_before(self, method: str, args: dict[str, Any]) -> None:
        self._slack_call(method, args, after=False)

    async def _slack_after(self, method: str, args: dict[str, Any]) -> None:
        self._slack_call(method, args, after=True)

    def _slack_call(self, method: str, args: dict[str, Any], *, after: bool) -> None:
        t = self.trigger
        if t is None or t.hit is not None:
            return
        if t.phase == "accept" and method == "users.info" and not after:
            if args.get("user") == _user_of(t.token):
                t.fire("users.info")
        elif (
            t.phase == "posting"
            and method == t.method
            and args.get("channel") == t.channel
            and t.after == after
        ):
            t.fire(f"{method} ({'after' if after else 'before'} Slack did it)")
            if not after:
                raise Drop  # the process died before its request was complete

    def _model_request(self, token: str, final: bool) -> None:
        t = self.trigger
        if t is not None and t.hit is None and t.token == token and t.phase == "between" and final:
            t.fire("model request with the tool result")

    def _model_event(self, token: str, final: bool, index: int) -> None:
        t = self.trigger
        if t is None or t.hit is not None or t.token != token or index != t.index:
            return
        if (t.phase == "stream" and not final) or (t.phase == "final_stream" and final):
            t.fire(f"{'final' if final else 'first'} model stream, event {index}")

    def fetched(self, token: str) -> None:
        self.fetches.append(token)
        t = self.trigger
        if t is not None and t.hit is None and t.token == token and t.phase == "tool":
            t.fire("web_fetch of the page")

    # the runs

    async def run_once(
        self, n: int, rng: random.Random, session: aiohttp.ClientSession, store: ConversationStore
    ) -> RunResult:
        if self._restarting is not None:
            await self._restarting
            self._restarting = None
        if not self._phases:  # every phase once per cycle, in a seeded order
            self._phases = list(self.plan or PHASES)
            if self.plan is None:
                rng.shuffle(self._phases)
            self._phases.reverse()
        phase = self.phase = self._phases.pop()
        token = f"r{n}"
        channel = f"C{n:04d}"
        alive = [i for i in self.instances if i.alive]
        victim = rng.choice(alive)
        # (the first reply streams in 14 events, the final one in 22)
        index = {"stream": rng.randrange(1, 8), "final_stream": rng.randrange(1, 16)}
        method, after = rng.choice(POSTING), rng.random() < 0.5
        if phase == "posting" and self.posting is not None:
            method, after = self.posting
        trigger = Trigger(token, channel, phase, index.get(phase, 0), method, after, victim.kill)
        result = RunResult(n, self.backend, phase, None)
        self.trigger = trigger
        first = self._event(channel, token, user=_user_of(token))
        acked = await self._deliver(session, victim, first)
        killed = asyncio.ensure_future(trigger.fired.wait())
        settled = asyncio.ensure_future(
            self.slack.wait_for(lambda f: self._settled(channel, first["ts"], token), SETTLE_S)
        )
        await asyncio.wait({killed, settled}, return_when=asyncio.FIRST_COMPLETED)
        for waiting in (killed, settled):
            waiting.cancel()
        if not trigger.fired.is_set() and (settled.cancelled() or settled.exception()):
            result.problem = "the first answer neither finished nor was killed"
            self.trigger = None
            return result
        self.trigger = None
        result.hit = trigger.hit
        if trigger.hit is None:  # the victim lives on and answers the follow-up itself
            result.missed = True
            result.problem = "missed: the answer finished before the kill (no crash tested)"
        else:
            await victim.reap()
        others = [i for i in self.instances if i.alive]
        restart = not others or trigger.phase == "accept" or self.backend == "sqlite"
        if restart and not victim.alive:
            await victim.start()  # (the others cannot replay the victim's own journal)
            others = [i for i in self.instances if i.alive]
        if not acked:  # Slack delivers an unacknowledged event again
            await self._deliver(session, rng.choice(others), first, retry=True)
        try:
            await self.slack.wait_for(
                lambda f: self._settled(channel, first["ts"], token), SETTLE_S
            )
        except TimeoutError:
            result.problem = "the first answer was neither finished nor announced"
        if not victim.alive:  # back in the background: the others answer meanwhile
            self._restarting = asyncio.ensure_future(victim.start())
        follow = self._event(channel, f"{token}-next", user=_user_of(token), thread=first["ts"])
        follow_acked = await self._deliver_as_slack(session, rng, follow)
        try:
            await self.slack.wait_for(
                lambda f: self._finished(channel, first["ts"], follow["ts"], f"{token}-next"),
                SETTLE_S,
            )
            result.follow_up_answered = True
        except TimeoutError:
            result.problem = result.problem or (
                "the follow-up was not answered"
                if follow_acked
                else "the follow-up was never acknowledged (refused four times)"
            )
        await self._check(result, store, channel, first["ts"], token)
        return result

    async def _deliver_as_slack(
        self, session: aiohttp.ClientSession, rng: random.Random, event: dict[str, Any]
    ) -> bool:
        """Deliver `event` to any live instance as Slack does: one not acknowledged (a 500: its
        journal write took too long on a loaded machine) is sent again, three times (Slack
        waits 1 and 5 minutes between; here 1, 4 and 16 s)."""
        for attempt in range(SLACK_RETRIES + 1):
            alive = [i for i in self.instances if i.alive]
            if await self._deliver(session, rng.choice(alive), event, retry=attempt > 0):
                return True
            if attempt < SLACK_RETRIES:
                await asyncio.sleep(4.0**attempt)
        return False

    async def _deliver(
        self,
        session: aiohttp.ClientSession,
        instance: Instance,
        event: dict[str, Any],
        *,
        retry: bool = False,
    ) -> bool:
        """Post the signed event; True if it was acknowledged (200)."""
        payload = event["payload"]
        stamp = int(time.time())
        body = json.dumps(payload)
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": str(stamp),
            "X-Slack-Signature": sign(body, SECRET, stamp),
        }
        if retry:
            headers |= {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_error"}
        try:
            async with session.post(instance.url, data=body, headers=headers) as response:
                await response.read()
                return response.status == 200
        except (aiohttp.ClientError, ConnectionError):
            return False

    def _event(
        self, channel: str, token: str, *, user: str, thread: str | None = None
    ) -> dict[str, Any]:
        text = f"<@{self.slack.bot_user_id}> tok:{token}"
        stored = self.slack.seed_message(channel, text, user=user, thread_ts=thread)
        event: dict[str, Any] = {
            "type": "app_mention",
            "user": user,
            "text": text,
            "ts": stored["ts"],
            "channel": channel,
            "event_ts": stored["ts"],
            "team": self.slack.team_id,
        }
        if thread is not None:
            event["thread_ts"] = thread
        return {"ts": stored["ts"], "payload": self.slack.event_callback(event)}

    # what the thread shows

    def _shown(self, channel: str, thread_ts: str, token: str) -> int:
        """How many finished messages of the thread show the answer to `token`."""
        needle = f"re tok:{token} "
        return sum(
            needle in _readable(m) and m.get("streaming") != "in_progress"
            for m in self.slack.bot_replies(channel, thread_ts)
        )

    def _announced(self, channel: str, thread_ts: str) -> int:
        return sum(
            INTERRUPTED_TEXT[:40] in _readable(m)
            for m in self.slack.bot_replies(channel, thread_ts)
        )

    def _settled(self, channel: str, thread_ts: str, token: str) -> bool:
        """The answer is shown complete, or its interruption is announced."""
        shown = self._shown(channel, thread_ts, token) > 0
        return shown or self._announced(channel, thread_ts) > 0

    def _finished(self, channel: str, thread_ts: str, message_ts: str, token: str) -> bool:
        return self._shown(channel, thread_ts, token) > 0 and (
            "white_check_mark" in self.slack.reactions(channel, message_ts)
        )

    async def _check(
        self, result: RunResult, store: ConversationStore, channel: str, root: str, token: str
    ) -> None:
        if os.environ.get("CHAOS_DUMP"):
            for m in self.slack.thread(channel, root):
                print("   ", _readable(m)[:400], flush=True)
        shown_first = self._shown(channel, root, token)
        shown_next = self._shown(channel, root, f"{token}-next")
        result.duplicates = max(0, shown_first - 1) + max(0, shown_next - 1)
        result.announced = self._announced(channel, root)
        result.interrupted = shown_first == 0
        key = f"slack:{self.slack.team_id}:{channel}:{root}"
        conversation = await store.get_conversation(key)
        said: list[str] = []
        if conversation is not None:
            loaded = await store.load(conversation.id)
            messages = [stored.message for stored in loaded.messages]
            said = [m.text() for m in messages if isinstance(m, UserMessage)]
            # A run is closed in the store just after its end is shown (the ✅ is its last
            # call): give it a moment before calling it left open.
            deadline = time.monotonic() + SETTLE_S
            while key in {r.conversation_key for r in await store.running_runs()}:
                if time.monotonic() > deadline:
                    result.replayable = False
                    break
                await asyncio.sleep(0.05)
            loaded = await store.load(conversation.id)
            messages = [stored.message for stored in loaded.messages]
            said = [m.text() for m in messages if isinstance(m, UserMessage)]
            if unanswered_tool_calls(messages):
                result.replayable = False
        for asked in (token, f"{token}-next"):
            if not any(f"tok:{asked}" in text and f"tok:{asked}-" not in text for text in said):
                result.lost += 1
        expected_announcements = 1 if result.interrupted else 0
        problems = [
            result.problem,
            f"{result.lost} user message(s) lost" if result.lost else "",
            f"{result.duplicates} duplicate answer(s)" if result.duplicates else "",
            "history not replayable" if not result.replayable else "",
            (
                f"announced {result.announced}x, expected {expected_announcements}"
                if result.announced != expected_announcements
                else ""
            ),
            "" if shown_next == 1 else f"the follow-up shown {shown_next}x",
        ]
        result.problem = "; ".join(p for p in problems if p)
        result.survived = not result.problem

    async def revive(self) -> None:
        """Every instance up again (after a run the harness could not finish)."""
        if self._restarting is not None:
            await asyncio.gather(self._restarting, return_exceptions=True)
            self._restarting = None
        for instance in self.instances:
            if not instance.alive:
                instance.kill()
                await instance.reap()
                await instance.start()

    async def close(self) -> None:
        """Stop every instance, a restart in flight included, whatever fails meanwhile."""
        try:
            if self._restarting is not None:
                await asyncio.gather(self._restarting, return_exceptions=True)
        finally:
            await asyncio.gather(*(i.stop() for i in self.instances), return_exceptions=True)


def _user_of(token: str) -> str:
    return "U" + token.split("-")[0].upper()


def _readable(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False)


async def crash_runs(
    backend: Backend,
    runs: int,
    *,
    seed: int = 13,
    database_url: str | None = None,
    progress: Callable[[RunResult], None] | None = None,
    plan: list[Phase] | None = None,
    posting: tuple[str, bool] | None = None,
) -> CrashReport:
    """`runs` kills of the real process (SQLite: one; PostgreSQL at `database_url`: three)."""
    rng = random.Random(seed)
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix=f"teammate-chaos-{backend}-") as tmp:
        directory = Path(tmp)
        rig: CrashRig | None = None

        async def page(request: web.Request) -> web.Response:
            token = request.match_info["token"]
            if rig is not None:
                rig.fetched(token)
            return web.Response(
                text=f"<html><body>page {token}</body></html>", content_type="text/html"
            )

        app = web.Application()
        app.router.add_get("/{token}", page)
        slack = HookedSlack()
        async with local_site(app) as site, slack:
            model = ChaosAnthropic(site)
            await model.start()
            try:
                rig = CrashRig(backend, directory, slack, model, site, database_url)
                rig.plan, rig.posting = plan, posting
                store = await _open_store(backend, rig, database_url)
                try:
                    first, *rest = rig.instances  # the first migrates alone
                    await first.start()
                    # (every start finishes or fails before close() stops them: none is lost)
                    starts = await asyncio.gather(
                        *(i.start() for i in rest), return_exceptions=True
                    )
                    for failed in starts:
                        if isinstance(failed, BaseException):
                            raise failed
                    async with aiohttp.ClientSession() as session:
                        for n in range(runs):
                            try:
                                result = await rig.run_once(n, rng, session, store)
                            except Exception as exc:  # (a start that timed out): counted, on
                                result = RunResult(n, backend, rig.phase, None)
                                result.problem = f"the harness failed: {exc!r}"
                                await rig.revive()
                            results.append(result)
                            if progress is not None:
                                progress(result)
                finally:
                    await rig.close()
                    await store.close()
            finally:
                await model.close()
    return CrashReport(backend, results)


async def _open_store(
    backend: Backend, rig: CrashRig, database_url: str | None
) -> ConversationStore:
    if backend == "postgres":
        from storage.postgres import PostgresStore

        assert database_url is not None
        return await PostgresStore.open(database_url)
    from storage.sqlite import SqliteStore

    path = rig.instances[0].data_dir / "teammate.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return await SqliteStore.open(path)
