"""N conversations at once through the real runner and SQLite store.

Each conversation gets one message; the scripted model takes 1 s per reply (an asyncio sleep, so
replies overlap as real network calls do). Everything else is real: delivery de-duplication,
the user message committed first, run records, persisted replies, usage ledger, surfaces.

Figures per N: wall time from the first submit to the last run recorded, its ratio to the
model's 1 s, the overhead per turn (wall time of the same N conversations with a zero-latency
model, divided by N: comparable with every earlier version), and peak resident memory of the
process. The overhead is then split, per turn, in CPU time: "loop alone" (the same
conversations through the agent loop and scripted model only: the harness, not the runner),
"runner own" (the event loop's CPU beyond the loop alone: what the runner adds, the store's
event-loop side included) and "store thread" (CPU of the store's driver threads, aiosqlite's
writer and reader, beside the event loop).

The steering-heavy case (issue 8): STEER_N conversations, each receiving 3 messages 50-300 ms
apart while a 1 s model reply with one tool call runs (the later two are steered into the run,
delivered after the tool, and answered by a second 1 s reply). Reported: wall time, the
runner's overhead per model call (the same traffic with a zero-latency model and no gaps, wall
divided by model calls), messages answered / sent, duplicates (a message sent twice in one
request, or stored twice), and replay mismatches (the stored conversation, replayed as the next
run would send it, differs from what the model was last sent plus its reply).

Run traces (the console's, `bots.traces`) are recorded as Teammate records them, and each wave
ends when the recorder has written its last batch (`close()`: that write is part of the cost).
`--traces both` runs every wave also with a recorder that records nothing (the runner as it
was before traces), alternating in the same process, and adds per-round ratios traced over
untraced and their medians: `traces_overhead_ratio` (overhead per turn, N = the largest size),
`traces_loop_cpu_ratio` (event-loop CPU per turn) and the same for steering (`traces_steer_…`).

Run: uv run python benchmarks/concurrency.py [--sizes 100 1000] [--latency 1.0] [--steer 1000]
[--stores sqlite] [--rounds 1] [--traces on|off|both]. Prints two tables per variant and round
(with several variants, then a comparison: each figure's median over the rounds per variant,
and the first's over the other's), then one JSON line. Targets at N = 1,000:
wall < 1.3 s, peak memory < 300 MB;
steering: all answered, no duplicates, no mismatches, runner own < 0.5 ms per model call;
traces: each `traces_*_ratio` ≤ 1.10 (several rounds: single waves vary by ±30 % here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bots.incoming import Incoming
from bots.runner import ConversationRunner
from bots.settings import Settings
from bots.surface.contract import SurfaceEvent
from bots.traces.recorder import TraceRecorder
from core.history import repair_history
from core.loop import AgentContext, LoopConfig, RunControl, run_agent
from core.messages import AssistantMessage, Author, Message, ToolResultMessage, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore

# The stores measured, side by side when several (same run, alternating rounds); `--stores`
# picks. The database-thread store this one replaced was measured against it this way.
StoreClass = type[SqliteStore]
STORES: dict[str, StoreClass] = {"sqlite": SqliteStore}
UNTRACED = "-untraced"  # a variant's suffix with `--traces both`/`off`


class UntracedRecorder(TraceRecorder):
    """Records nothing: the runner as it was before run traces, the baseline that the console
    issue's "overhead per turn within 10 % with traces recorded" is measured against."""

    def put(self, run_id: int | None, event: SurfaceEvent) -> None:
        return None

    def shown(self, run_id: int, moment: Any) -> None:
        return None

    def stopped(self, run_id: int | None, by: Author | None, *, scope: str) -> None:
        return None

    def compacted(self, run_id: int, compaction: Any, *, forced: bool) -> None:
        return None


def recorder_for(store: SqliteStore, settings: Settings, traced: bool) -> TraceRecorder:
    if traced:
        return TraceRecorder(store, secrets=settings.secrets())
    return UntracedRecorder(store)


class CountingSurface:
    """A surface that only counts what it is shown (rendering cost is the adapters')."""

    def __init__(self) -> None:
        self.events = 0

    @property
    def ref(self) -> dict[str, Any]:
        return {"surface": "bench"}

    async def emit(self, event: SurfaceEvent) -> None:
        self.events += 1

    async def close(self) -> None:
        return None


def thread_cpu_s() -> tuple[float, float]:
    """CPU seconds so far: (this thread: the event loop, every other live thread: the store's
    driver threads). Apart, they show which side of the store a cost is on."""
    others = 0.0
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.ident is None:
            continue
        try:
            others += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # not Linux, or the thread just ended
            continue
    return time.thread_time(), others


async def run_wave(
    size: int, latency_s: float, data_dir: Path, store_class: StoreClass, traced: bool = True
) -> dict[str, float]:
    """`size` conversations answered once each: wall seconds, event-loop and store-thread CPU
    seconds."""
    store = await store_class.open(data_dir / "teammate.db")
    model = ScriptedModel(
        default=Reply(text="an answer of a few words", latency_s=latency_s), record=False
    )
    settings = Settings(data_dir=data_dir)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [],
        platform_rules="Plain text.",
        traces=recorder_for(store, settings, traced),
    )
    author = Author(id="U1", name="Ada")
    stamp = time.time()
    loop_cpu_before = time.thread_time()
    started = time.perf_counter()
    await asyncio.gather(
        *(
            runner.submit(
                Incoming(
                    conversation_key=f"bench:{data_dir.name}:{i}",
                    channel_key=f"bench:{i % 50}",
                    author=author,
                    text=f"question {i}",
                    delivery_id=f"{data_dir.name}-{i}",
                    timestamp=stamp,
                ),
                CountingSurface(),
            )
            for i in range(size)
        )
    )
    await runner.wait_all()
    await runner.traces.close()  # the traces' last batch is part of the cost
    wall = time.perf_counter() - started
    loop_cpu, store_cpu = thread_cpu_s()  # the store's thread was started for this wave
    runs = await store.usage_since(0)
    assert runs.output > 0
    await store.close()
    return {"wall": wall, "loop_cpu": loop_cpu - loop_cpu_before, "store_cpu": store_cpu}


class NoParams(BaseModel):
    pass


class LookTool(AgentTool[NoParams]):
    """The one tool call of the steering case: instant, so the model's time dominates."""

    name = "look"
    label = "Look"
    description = "Look around."
    parameters = NoParams

    async def execute(self, call_id: str, params: NoParams, ctx: ToolContext) -> ToolResult:
        return ToolResult.text("looked")


def said(message: Message) -> str:
    return message.text().rsplit("\n", 1)[-1] if isinstance(message, UserMessage) else ""


async def run_steering_wave(
    size: int,
    latency_s: float,
    data_dir: Path,
    store_class: StoreClass,
    *,
    gaps: bool,
    traced: bool = True,
) -> dict[str, float]:
    """`size` conversations of 3 messages each; checks every message against the model's
    requests and the stored history."""
    store = await store_class.open(data_dir / "teammate.db")

    def reply(request: ModelRequest) -> Reply:
        if any(isinstance(m, ToolResultMessage) for m in request.messages):
            return Reply(text="answered all of you", latency_s=latency_s)
        return Reply(tool_calls=[call("look")], latency_s=latency_s)

    model = ScriptedModel(default=reply)
    settings = Settings(data_dir=data_dir)
    runner = ConversationRunner(
        store=store,
        settings=settings,
        model_factory=lambda _id: model,
        toolset_factory=lambda _channel: [LookTool()],
        platform_rules="Plain text.",
        traces=recorder_for(store, settings, traced),
    )
    author = Author(id="U1", name="Ada")
    rng = random.Random(size)
    stamp = time.time()

    async def conversation(index: int) -> None:
        for message in range(3):
            if message and gaps:
                await asyncio.sleep(rng.uniform(0.05, 0.3))
            incoming = Incoming(
                conversation_key=f"steer:{data_dir.name}:{index}",
                channel_key=f"steer:{index % 50}",
                author=author,
                text=f"c{index} m{message}",
                delivery_id=f"{data_dir.name}-{index}-{message}",
                timestamp=stamp,
            )
            await runner.submit(incoming, CountingSurface())

    loop_cpu_before = time.thread_time()
    started = time.perf_counter()
    await asyncio.gather(*(conversation(i) for i in range(size)))
    await runner.wait_all()
    await runner.traces.close()  # the traces' last batch is part of the cost
    wall = time.perf_counter() - started
    loop_cpu, store_cpu = thread_cpu_s()

    last_request: dict[str, ModelRequest] = {}
    duplicates = 0
    for request in model.requests:
        lines = [said(m) for m in request.messages if isinstance(m, UserMessage)]
        duplicates += len(lines) - len(set(lines))
        last_request[lines[0].split()[0]] = request
    answered = mismatches = 0
    for index in range(size):
        conv = await store.get_conversation(f"steer:{data_dir.name}:{index}")
        assert conv is not None
        stored = [s.message for s in (await store.load(conv.id)).messages]
        lines = [said(m) for m in stored if isinstance(m, UserMessage)]
        duplicates += len(lines) - len(set(lines))
        last_reply = max(
            (i for i, m in enumerate(stored) if isinstance(m, AssistantMessage)), default=-1
        )
        answered += sum(
            1
            for i, m in enumerate(stored)
            if isinstance(m, UserMessage) and i < last_reply and stored[last_reply].text()
        )
        seen = last_request.get(f"c{index}")
        replay = [m.model_dump() for m in repair_history(stored)]
        sent = [m.model_dump() for m in seen.messages] if seen else []
        if seen is None or replay != [*sent, stored[-1].model_dump()]:
            mismatches += 1
    await store.close()
    return {
        "wall": wall,
        "sent": size * 3,
        "answered": answered,
        "duplicates": duplicates,
        "mismatches": mismatches,
        "model_calls": len(model.requests),
        "loop_cpu": loop_cpu - loop_cpu_before,
        "store_cpu": store_cpu,
    }


async def run_loops_alone(size: int, *, steering: bool) -> tuple[float, int]:
    """The same conversations through the agent loop and scripted model alone (no runner, no
    store, no surface), zero latency: what the harness itself costs. Returns (CPU s, model
    calls). Subtracted from the runner's figure, it leaves the runner's own cost."""
    author = Author(id="U1", name="Ada")
    look = LookTool()

    def reply(request: ModelRequest) -> Reply:
        if any(isinstance(m, ToolResultMessage) for m in request.messages):
            return Reply(text="answered all of you", latency_s=0.0)
        return Reply(tool_calls=[call("look")], latency_s=0.0)

    model = (
        ScriptedModel(default=reply)
        if steering
        else ScriptedModel(default=Reply(text="an answer of a few words", latency_s=0.0))
    )

    async def conversation(index: int) -> None:
        control = RunControl()
        if steering:  # the later two arrive during the first reply, as in the runner's case
            for later in (1, 2):
                control.steer(UserMessage(content=f"c{index} m{later}", author=author))
        context = AgentContext(
            "Plain text.",
            [UserMessage(content=f"c{index} m0", author=author)],
            [look] if steering else [],
        )
        async for _event in run_agent(context, model, control=control, config=LoopConfig()):
            pass

    cpu_before = time.thread_time()  # CPU, not wall: comparable with the runner's CPU
    await asyncio.gather(*(conversation(i) for i in range(size)))
    return time.thread_time() - cpu_before, len(model.requests) if steering else size


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--steer", type=int, default=1000, help="conversations; 0 to skip")
    parser.add_argument("--stores", nargs="+", choices=sorted(STORES), default=list(STORES))
    parser.add_argument("--rounds", type=int, default=1, help="each variant, alternating")
    parser.add_argument(
        "--traces",
        choices=("on", "off", "both"),
        default="on",
        help="record run traces (as Teammate does), not, or both alternating and compared",
    )
    args = parser.parse_args()
    traced = {"on": (True,), "off": (False,), "both": (True, False)}[args.traces]
    variants = {
        name + ("" if on else UNTRACED): (STORES[name], on) for name in args.stores for on in traced
    }
    print(
        f"conditions: python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, model latency "
        f"{args.latency:g} s, one message per conversation, real runner + SQLite store (WAL) "
        "in a temp dir; variants: " + ", ".join(variants)
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):  # alternating, so that all see the same machine
            for name, (store_class, on) in variants.items():
                print(f"\n== {name} (round {round_ + 1}/{args.rounds})")
                where = Path(tmp) / f"{name}-{round_}"
                runs[name].append(await measure(args, store_class, where, on))
    by_variant = {
        name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for name, rounds in runs.items()
    }
    figures = by_variant[next(iter(variants))]
    if len(by_variant) > 1:
        figures = compare(by_variant)
    if args.traces == "both":
        figures.update(traces_ratios(runs, args))
    print(json.dumps(figures))


def traces_ratios(
    runs: dict[str, list[dict[str, float]]], args: argparse.Namespace
) -> dict[str, float]:
    """Traced over untraced, per round (the two waves of a round ran minutes apart at most)
    and their median: the overhead per turn (wall) and the event loop's CPU per turn, for the
    largest size and the steering case."""
    out: dict[str, float] = {}
    size = max(args.sizes)
    keys = {
        "traces_overhead_ratio": f"overhead_ms_per_turn_{size}",
        "traces_loop_cpu_ratio": f"loop_cpu_ms_per_turn_{size}",
    }
    if args.steer:
        keys |= {
            "traces_steer_overhead_ratio": "steer_overhead_ms_per_turn",
            "traces_steer_loop_cpu_ratio": "steer_loop_cpu_ms_per_turn",
        }
    print(f"\ntraced / untraced per round ({len(next(iter(runs.values())))} rounds):")
    for name in args.stores:
        on, off = runs[name], runs[name + UNTRACED]
        for label, key in keys.items():
            ratios = [a[key] / b[key] for a, b in zip(on, off, strict=True) if b[key] > 0]
            median = statistics.median(ratios)
            print(
                f"  {name} {key:<32} "
                + " ".join(f"{r:.2f}" for r in ratios)
                + f"  median {median:.3f}"
            )
            out[label + ("" if name == args.stores[0] else f"_{name}")] = round(median, 3)
    return out


async def measure(
    args: argparse.Namespace, store_class: StoreClass, tmp: Path, traced: bool = True
) -> dict[str, float]:
    figures: dict[str, float] = {}
    print(f"{'N':>6} {'wall s':>8} {'ratio':>7} {COST_HEADER} {'peak MB':>8}")
    for size in args.sizes:
        base = tmp / f"n{size}"
        (base / "warm").mkdir(parents=True)
        (base / "zero").mkdir()
        (base / "real").mkdir()
        await run_wave(10, 0.0, base / "warm", store_class, traced)
        zero = await run_wave(size, 0.0, base / "zero", store_class, traced)
        alone, alone_calls = await run_loops_alone(size, steering=False)
        wall = (await run_wave(size, args.latency, base / "real", store_class, traced))["wall"]
        cost = costs(zero, size, alone, alone_calls)
        peak = peak_rss_mb()
        figures.update(
            {
                f"wall_s_{size}": round(wall, 3),
                f"ratio_{size}": round(wall / args.latency, 3),
                **{f"{name}_{size}": value for name, value in cost.items()},
                f"peak_mb_{size}": round(peak, 1),
            }
        )
        print(f"{size:>6} {wall:>8.3f} {wall / args.latency:>7.3f} {cost_row(cost)} {peak:>8.1f}")
    if args.steer:
        figures.update(
            await steering_case(args.steer, args.latency, tmp / "steer", store_class, traced)
        )
    return figures


# Lower is better for every compared figure but these.
HIGHER_IS_BETTER = {"steer_answered", "steer_sent"}


def compare(by_store: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each figure per store, and the first store's over each other's (above 1: the other is
    better, whichever way the figure points). Peak memory is the process's, so it is left out
    (the second store runs after the first in the same process)."""
    names = list(by_store)
    base = names[0]
    print()
    header = f"{'figure':<34}" + "".join(f"{n:>12}" for n in names)
    print(header + "".join(f"{'gain ' + n:>16}" for n in names[1:]))
    out: dict[str, float] = {}
    for key, first in by_store[base].items():
        if key.startswith("peak_mb"):
            continue
        line = f"{key:<34}" + "".join(f"{by_store[n][key]:>12.3f}" for n in names)
        for other in names[1:]:
            theirs = by_store[other][key]
            if key in HIGHER_IS_BETTER:
                gain = theirs / first if first else float("nan")
            else:
                gain = first / theirs if theirs > 0 else float("nan")
            line += f"{gain:>15.2f}x"
            out[f"{key}_gain_{other}"] = round(gain, 3)
        print(line)
        for n in names:
            out[f"{key}_{n}"] = by_store[n][key]
    return out


COST_HEADER = f"{'overhead ms/turn':>17} {'loop alone':>10} {'runner own':>10} {'store thread':>12}"


def costs(zero: dict[str, float], calls: int, alone_s: float, alone_calls: int) -> dict[str, float]:
    """Per model call, zero latency: `overhead` (wall, as measured since the first version);
    `loop` (CPU of the agent loop and scripted model alone: the harness); `runner_own` (the runner's
    event-loop CPU beyond the loop's: what the runner itself adds); `store_thread` (CPU of the
    store's database thread, which runs beside the event loop)."""
    loop_ms = alone_s / alone_calls * 1000
    return {
        "overhead_ms_per_turn": round(zero["wall"] / calls * 1000, 3),
        "loop_cpu_ms_per_turn": round(zero["loop_cpu"] / calls * 1000, 3),
        "loop_ms_per_turn": round(loop_ms, 3),
        "runner_own_ms_per_turn": round(zero["loop_cpu"] / calls * 1000 - loop_ms, 3),
        "store_thread_ms_per_turn": round(zero["store_cpu"] / calls * 1000, 3),
    }


def cost_row(cost: dict[str, float]) -> str:
    return (
        f"{cost['overhead_ms_per_turn']:>17.3f} {cost['loop_ms_per_turn']:>10.3f} "
        f"{cost['runner_own_ms_per_turn']:>10.3f} {cost['store_thread_ms_per_turn']:>12.3f}"
    )


async def steering_case(
    size: int, latency_s: float, base: Path, store_class: StoreClass, traced: bool = True
) -> dict[str, float]:
    for name in ("warm", "zero", "real"):
        (base / name).mkdir(parents=True)
    print(
        f"\nsteering: {size} conversations x 3 messages 50-300 ms apart, model replies of "
        f"{latency_s:g} s (the first with one tool call)"
    )
    await run_steering_wave(10, 0.0, base / "warm", store_class, gaps=False, traced=traced)
    zero = await run_steering_wave(size, 0.0, base / "zero", store_class, gaps=False, traced=traced)
    alone, alone_calls = await run_loops_alone(size, steering=True)
    real = await run_steering_wave(
        size, latency_s, base / "real", store_class, gaps=True, traced=traced
    )
    cost = costs(zero, int(zero["model_calls"]), alone, alone_calls)
    print(
        f"{'N':>6} {'wall s':>8} {COST_HEADER} {'answered/sent':>14} {'duplicates':>10} "
        f"{'replay mismatches':>18}"
    )
    answered = f"{real['answered']:.0f}/{real['sent']:.0f}"
    print(
        f"{size:>6} {real['wall']:>8.3f} {cost_row(cost)} {answered:>14} "
        f"{real['duplicates'] + zero['duplicates']:>10.0f} "
        f"{real['mismatches'] + zero['mismatches']:>18.0f}"
    )
    return {
        "steer_sent": real["sent"],
        "steer_answered": real["answered"],
        "steer_duplicates": real["duplicates"] + zero["duplicates"],
        "steer_replay_mismatches": real["mismatches"] + zero["mismatches"],
        **{f"steer_{name}": value for name, value in cost.items()},
        "steer_wall_s": round(real["wall"], 3),
    }


if __name__ == "__main__":
    asyncio.run(main())
