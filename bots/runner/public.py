"""The conversation runner every adapter shares (docs/architecture.md, "The runner").

Owns: `ConversationRunner`, the public face, thin: `submit` accepts a message into its
conversation's inbox (one store transaction: de-duplication, backfill, the message) and hands
it to the drivers; `stop`, `wait`, `close`, `reset`, `usage` and `recover()` (once at start-up)
delegate to the parts below, which it builds and wires:

- `bots.runner.driver`: one driver per conversation, draining its inbox run after run, with
  the conversation's lease;
- `bots.runner.run`: one run, from its record through the overflow retry to its end;
- `bots.runner.recovery`: runs a dead process left open, closed; its inbox answered;
- `bots.runner.instances`: what other instances on the same database say, and the sweep;
- `bots.runner.service`: what adapters may ask of the store (`runner.conversations`);
- `bots.runner.shared`, `bots.runner.texts`: the state the parts share; what people are told.

A message that arrives while a run works is steered into it; it enters history when the loop
delivers it (`store.deliver`), so history is exactly what the model saw.

Must not: see platform payloads (adapters build `Incoming`), write SQL (the store does), or
render anything (surfaces do).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bots.access import access_refusal
from bots.attachments import user_message
from bots.errors import (
    is_storage_failure,
    new_reference,
    storage_failure_text,
    unexpected_failure_text,
)
from bots.features.approvals import Approvals
from bots.incoming import Incoming
from bots.prompt import PlatformRules, backfill_message
from bots.runner.driver import Drivers
from bots.runner.instances import Instances, stop_reason
from bots.runner.recovery import Recovery
from bots.runner.run import Runs, ToolsetFactory
from bots.runner.service import ConversationService
from bots.runner.shared import Shared, StopResult, SubmitResult
from bots.settings import Settings
from bots.surface.contract import Notice, Surface, SurfaceFactory
from bots.traces.recorder import TraceRecorder
from core.messages import Author, Usage
from core.models.base import Model
from core.tools import AnyTool
from storage.base import Accepted, ConversationStore, RunRecord, coordination_of

__all__ = ["ConversationRunner"]

log = logging.getLogger(__name__)


class ConversationRunner:
    """Runs conversations. Create one per process; `await recover()` once at start-up."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        settings: Settings,
        model_factory: Callable[[str], Model],
        # May be async (MCP tools: tools.mcp), never waiting long (see there).
        toolset_factory: ToolsetFactory,
        platform_rules: PlatformRules,
        surfaces: SurfaceFactory | None = None,
        clock: Callable[[], float] = time.time,
        channel_tools: Callable[[str], Sequence[AnyTool]] | None = None,
        traces: TraceRecorder | None = None,
    ) -> None:
        # For the CLI, the scheduler and tests; adapters use `conversations`.
        self.store = store
        # Each run's trace, recorded as it goes (docs/architecture.md, "Run traces").
        self.traces = traces or TraceRecorder(store, secrets=settings.secrets())
        self.settings = settings
        self.conversations = ConversationService(store)
        # Several instances on one database (docs/architecture.md, "Several instances"): a
        # lease per conversation and notifications; a single-process store grants every lease.
        self._instances = coordination_of(store)
        self._shared = Shared(
            store=store,
            settings=settings,
            instances=self._instances,
            surfaces=surfaces,
            traces=self.traces,
        )
        runs = Runs(
            self._shared,
            model_factory=model_factory,
            toolset_factory=toolset_factory,
            platform_rules=platform_rules,
            clock=clock,
            channel_tools=channel_tools,
        )
        self._recovery = Recovery(self._shared)
        self._drivers = Drivers(self._shared, runs, self._recovery)
        self._recovery.resume = self._drivers.resume
        self._others = Instances(self._shared, self._drivers)

    def use_workspace(self, channel_key: str, path: Path) -> None:
        """`channel_key`'s tools work in `path` instead of a directory of their own under the
        data directory (a terminal conversation: where the command was started)."""
        self._shared.workspaces.fix(channel_key, path)

    async def submit(self, incoming: Incoming, surface: Surface) -> SubmitResult:
        """Accept a message: stored in the conversation's inbox at once, then answered by a
        new run or steered into the running one. A repeated delivery is dropped; a person or
        channel not on the allow-lists is told so and nothing is stored."""
        key = incoming.conversation_key
        refusal = access_refusal(self.settings, incoming)
        if refusal is not None:
            log.info("refused %s in %s: %s", incoming.author.id, incoming.channel_key, refusal)
            feed = self._shared.feed(key, surface)
            feed.put(Notice(refusal, "warning", audience=incoming.author))
            feed.close()
            await feed.wait()  # nothing was stored, so nothing waits on this surface
            return "refused"
        message = await user_message(incoming, self._shared.workspaces.path(incoming.channel_key))
        backfill = [backfill_message(incoming.backfill)] if incoming.backfill else []
        accepting = asyncio.ensure_future(
            self.store.accept_delivery(
                key,
                message,
                channel_key=incoming.channel_key,
                delivery_id=incoming.delivery_id,
                backfill=backfill,
                title=incoming.title,
                surface_ref=surface.ref,
                also_claim=incoming.also_claim,
            )
        )
        try:
            accepted = await asyncio.shield(accepting)
        except asyncio.CancelledError:
            # The caller gave up, but the store may still commit: a message it accepted is
            # queued all the same (a platform's retry of it is then a duplicate).
            accepting.add_done_callback(lambda done: self._accepted_late(done, surface))
            raise
        except Exception as exc:
            # Not stored, so not answered: the sender is told so, never left in silence.
            reference = new_reference()
            log.exception("could not accept a message in %s (reference %s)", key, reference)
            if is_storage_failure(exc):
                text = storage_failure_text(exc, reference, accepting=True)
            else:
                text = unexpected_failure_text(reference)
            feed = self._shared.feed(key, surface)
            feed.put(Notice(text, "error", audience=incoming.author))
            feed.close()
            await feed.wait()
            raise
        if accepted is None:
            log.info("duplicate delivery %s dropped", incoming.delivery_id)
            return "duplicate"
        return self._drivers.enqueue(accepted, surface)

    def _accepted_late(self, done: asyncio.Future[Accepted | None], surface: Surface) -> None:
        if not done.cancelled() and done.exception() is None:
            accepted = done.result()
            if accepted is not None:
                self._drivers.enqueue(accepted, surface)

    def is_running(self, conversation_key: str) -> bool:
        return conversation_key in self._shared.active

    def running_in(self, channel_key: str) -> list[str]:
        """The conversations of a channel with work in progress (a run, or messages queued)."""
        return [
            key
            for key, state in self._shared.active.items()
            if state.conversation.channel_key == channel_key
        ]

    @property
    def approvals(self) -> Approvals:
        """Requests waiting for a person's yes, and their decisions (bots.features.approvals)."""
        return self._shared.approvals

    def current_run(self, conversation_key: str) -> int | None:
        """The id of the conversation's run in progress (for a Stop button), or None."""
        state = self._shared.active.get(conversation_key)
        return state.run.id if state is not None and state.run is not None else None

    def stop(
        self, conversation_key: str, run_id: int | None = None, *, by: Author | None = None
    ) -> StopResult:
        """Stop a conversation's work.

        With `run_id` (a Stop button on that run): stop that run if it is still the current
        one; messages queued behind it are answered by a follow-up run. A stale id stops
        nothing and returns "stale" (tell the person `STALE_STOP_TEXT`).
        Without: stop the current run and drop every message queued behind it; a notice
        names the messages that will not be answered. "idle" if there was nothing to stop.
        Not driven here but the store is shared: the stop is published for the instance that
        drives it, and "stopped" returned (whether anything was running there is not known).
        """
        if conversation_key not in self._shared.active and self._instances.shared:
            self._others.publish_stop(conversation_key, run_id, by)
            return "stopped"
        running = self.current_run(conversation_key)
        result = self._drivers.stop(conversation_key, run_id, stop_reason(by))
        if result == "stopped":
            scope = "run" if run_id is not None else "conversation"
            self.traces.stopped(run_id or running, by, scope=scope)
        return result

    def inbox_depth(self) -> int:
        """Messages accepted here and waiting for a run (for `/metrics`)."""
        return sum(len(state.inbox) for state in self._shared.active.values())

    async def wait(self, conversation_key: str) -> None:
        """Return once the conversation has no run in progress and its surfaces are shown."""
        while True:
            state = self._shared.active.get(conversation_key)
            if state is not None:
                await state.done.wait()
                continue
            feeds = [
                f.finished
                for f in self._shared.feeds.get(conversation_key, ())
                if not f.finished.done()
            ]
            if not feeds:
                return
            await asyncio.wait(feeds)

    async def wait_all(self) -> None:
        while True:
            busy = set(self._shared.active)
            busy |= {
                k
                for k, feeds in self._shared.feeds.items()
                if any(not f.finished.done() for f in feeds)
            }
            if not busy:
                return
            for key in busy:
                await self.wait(key)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop every run and wait (bounded) for them to record their outcome. Messages still
        queued stay pending in the store: the next start-up's `recover()` answers them (with
        several instances, another instance's sweep may answer them first)."""
        shared = self._shared
        shared.closing = True
        for task in list(shared.background):
            task.cancel()
        for state in list(shared.active.values()):
            run = state.run
            if run is not None and run.id is not None and shared.approvals.park(run.id):
                # Waiting for a person: left open, shown as it is, its request kept; the next
                # start continues it (bots.runner.resume).
                run.feed.abandon()
                if state.task is not None:
                    state.task.cancel()
            elif run is not None:
                run.cancel("Teammate is shutting down.")
        tasks = [s.task for s in shared.active.values() if s.task is not None]
        waits: list[asyncio.Future[None]] = [*tasks]
        waits += [f.finished for feeds in shared.feeds.values() for f in feeds]
        if waits:
            await asyncio.wait(waits, timeout=timeout_s)
        await self.traces.close()

    async def reset(self, conversation_key: str) -> bool:
        """Start the conversation afresh: later runs see nothing before this point."""
        conversation = await self.store.get_conversation(conversation_key)
        if conversation is None:
            return False
        loaded = await self.store.load(conversation.id)
        if loaded.last_seq == 0:
            return False
        await self.store.add_compaction(conversation.id, "", loaded.last_seq, {"reset": True})
        return True

    async def usage(self, conversation_key: str, since: float = 0.0) -> Usage:
        conversation = await self.store.get_conversation(conversation_key)
        if conversation is None:
            return Usage()
        return await self.store.usage_since(since, conversation_id=conversation.id)

    async def recover(self) -> list[RunRecord]:
        """Close runs a crash interrupted (history made replayable for good, and a
        `RunFinished` shown where each run was shown), then answer messages that were accepted
        but never delivered. Returns the runs recovered. Call it once at start-up; with several
        instances it also starts listening to the others and sweeping for what dead ones left
        (`bots.runner.instances`)."""
        self._others.start(self.recover)
        return await self._recovery.recover(self._drivers.adopt)
