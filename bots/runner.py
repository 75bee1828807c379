"""The conversation runner every adapter shares (docs/architecture.md, "The runner").

Owns: run orchestration. `submit` accepts a message into its conversation's inbox (one store
transaction: de-duplication, backfill, the message); one driver task per conversation drains
that inbox, run after run, and leaves only when the inbox is empty, in the same step as it
leaves the active map (no await between the check and the removal), so no message can slip in
between. A message that arrives while a run works is steered into it; it enters history when
the loop delivers it (`store.deliver`), so history is exactly what the model saw. Also: run
records with outcome and usage, compaction and the overflow retry, run-scoped stop, crash
recovery at start-up, and each surface fed through its own queue (`bots.surface_feed`).

Must not: see platform payloads (adapters build `Incoming`), write SQL (the store does), or
render anything (surfaces do).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeAlias

from bots import compaction
from bots.access import access_refusal
from bots.attachments import files_out, user_message
from bots.budgets import budget_refusal
from bots.channel_config import keeps_tool
from bots.errors import (
    describe_model_error,
    is_storage_failure,
    new_reference,
    storage_failure_text,
    unexpected_failure_text,
)
from bots.fairness import RunSlots
from bots.inbox import ConversationState, Queued, RunState, Unseen
from bots.incoming import Incoming
from bots.memory import memory_block
from bots.prompt import (
    PlatformRules,
    backfill_message,
    channel_context_note,
    channel_context_text,
    rules_for,
    system_prompt,
)
from bots.recovery import INTERRUPTED_TEXT, OWNER, owner_alive
from bots.settings import ChannelConfig, Settings
from bots.surface import Notice, RunFinished, RunStarted, Surface, SurfaceFactory
from bots.surface_feed import SurfaceFeed
from bots.workspaces import Workspaces
from core.events import AgentEnd, MessageEnd, ToolExecutionEnd
from core.history import interrupted_result, unanswered_tool_calls
from core.loop import AgentContext, LoopConfig, RunControl, run_agent
from core.messages import (
    AssistantMessage,
    Author,
    Message,
    ToolResultMessage,
    Usage,
)
from core.models.base import Model
from core.models.catalog import retired_model
from core.tools import AnyTool
from storage.base import (
    Accepted,
    Conversation,
    ConversationStore,
    LeaseLost,
    LoadedConversation,
    NewInboxItem,
    Notification,
    Resync,
    RunOutcome,
    RunRecord,
    StopRequest,
    coordination_of,
)

log = logging.getLogger(__name__)

SubmitResult: TypeAlias = Literal["started", "steered", "duplicate", "refused"]
StopResult: TypeAlias = Literal["stopped", "stale", "idle"]

DELIVERY_MEMORY_S = 7 * 24 * 3600
QUEUED_TEXT = "Got it. I'm still working on an earlier message here; I'll read this one next."
DELIVERED_TEXT = "I've read this and I'm taking it into account."
OVERSIZED_TEXT = (
    "This message is too long for the model (about {tokens:,} tokens; it reads at most about "
    "{room:,} at once), so I haven't read it. Send a shorter message, or attach the text as "
    "a file and ask about it."
)
STALE_STOP_TEXT = "That answer has already finished; nothing was stopped."
RETIRED_MODEL_TEXT = (
    "This channel's model {model} was retired on {date} and no longer answers, so I'm using "
    "{fallback}. An admin can choose another with `/teammate config model`."
)
LEASE_LOST_TEXT = "Another Teammate instance took over this conversation."
# How long a run's end may take to show before the run is closed in the store anyway.
FINAL_SHOWN_WAIT_S = 30.0
REPAIRS_AT_ONCE = 16  # runs a recovery closes at once (each waits for its end to be shown)
# Several instances: how often each looks for conversations a dead instance left behind.
TAKEOVER_SWEEP_S = 15.0


class ConversationRunner:
    """Runs conversations. Create one per process; `await recover()` once at start-up."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        settings: Settings,
        model_factory: Callable[[str], Model],
        # May be async (MCP tools: tools.mcp), never waiting long (see there).
        toolset_factory: Callable[[str], Sequence[AnyTool] | Awaitable[Sequence[AnyTool]]],
        platform_rules: PlatformRules,
        surfaces: SurfaceFactory | None = None,
        clock: Callable[[], float] = time.time,
        channel_tools: Callable[[str], Sequence[AnyTool]] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self._model_factory = model_factory
        self._toolset_factory = toolset_factory
        # Tools bound to the run's channel (memory, schedules): not narrowed by a channel's
        # stored tool list, which names only the file's tools.
        self._channel_tools = channel_tools
        self._platform_rules = platform_rules
        self._surfaces = surfaces
        self._clock = clock
        self._models: dict[str, Model] = {}
        self._active: dict[str, ConversationState] = {}
        self._feeds: dict[str, set[SurfaceFeed]] = {}  # still showing, per conversation
        self._workspaces = Workspaces(settings.workspaces_dir)
        self._closing = False
        # Several instances on one database (docs/architecture.md, "Several instances"): a
        # lease per conversation and notifications; a single-process store grants every lease.
        self._instances = coordination_of(store)
        self._background: set[asyncio.Task[None]] = set()
        # Runs being repaired here, by conversation: its driver answers nothing before they
        # are closed (see `_repair`).
        self._repairing: dict[int, set[asyncio.Event]] = {}
        self._listening = False
        self._slots = RunSlots(
            total=settings.max_concurrent_runs,
            per_channel=settings.max_runs_per_channel,
            per_user=settings.max_runs_per_user,
        )

    # -- the public face -------------------------------------------------------------------

    async def submit(self, incoming: Incoming, surface: Surface) -> SubmitResult:
        """Accept a message: stored in the conversation's inbox at once, then answered by a
        new run or steered into the running one. A repeated delivery is dropped; a person or
        channel not on the allow-lists is told so and nothing is stored."""
        key = incoming.conversation_key
        refusal = access_refusal(self.settings, incoming)
        if refusal is not None:
            log.info("refused %s in %s: %s", incoming.author.id, incoming.channel_key, refusal)
            feed = self._feed(key, surface)
            feed.put(Notice(refusal, "warning", audience=incoming.author))
            feed.close()
            await feed.wait()  # nothing was stored, so nothing waits on this surface
            return "refused"
        message = await user_message(incoming, self._workspaces.path(incoming.channel_key))
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
            feed = self._feed(key, surface)
            feed.put(Notice(text, "error", audience=incoming.author))
            feed.close()
            await feed.wait()
            raise
        if accepted is None:
            log.info("duplicate delivery %s dropped", incoming.delivery_id)
            return "duplicate"
        return self._enqueue(accepted, surface)

    def _accepted_late(self, done: asyncio.Future[Accepted | None], surface: Surface) -> None:
        if not done.cancelled() and done.exception() is None:
            accepted = done.result()
            if accepted is not None:
                self._enqueue(accepted, surface)

    def _enqueue(self, accepted: Accepted, surface: Surface) -> SubmitResult:
        """Join the conversation's driver, or start one: one step, with no await in it."""
        key = accepted.conversation.key
        feed = self._feed(key, surface)
        queued = Queued(accepted.item, feed)
        state = self._active.get(key)
        if state is None:
            state = ConversationState(accepted.conversation)
            state.inbox[accepted.item.id] = queued
            state.seen.add(accepted.item.id)
            self._start_driver(state)
            return "started"
        if accepted.item.id not in state.seen:  # (else already taken in from the store)
            state.seen.add(accepted.item.id)
            state.inbox[accepted.item.id] = queued
            if state.run is not None:
                state.run.steer(queued)
        feed.put(Notice(QUEUED_TEXT, "info", audience=queued.author))
        return "steered"

    def is_running(self, conversation_key: str) -> bool:
        return conversation_key in self._active

    def running_in(self, channel_key: str) -> list[str]:
        """The conversations of a channel with work in progress (a run, or messages queued)."""
        return [
            key
            for key, state in self._active.items()
            if state.conversation.channel_key == channel_key
        ]

    def current_run(self, conversation_key: str) -> int | None:
        """The id of the conversation's run in progress (for a Stop button), or None."""
        state = self._active.get(conversation_key)
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
        """
        state = self._active.get(conversation_key)
        reason = f"Stopped by {by.name}." if by is not None else "Stopped on request."
        if state is None and self._instances.shared:
            # Maybe running on another instance: the one holding it stops it there.
            self._spawn(
                self._instances.publish_stop(
                    conversation_key,
                    run_id,
                    by_id=by.id if by is not None else None,
                    by_name=by.name if by is not None else None,
                )
            )
            return "stopped"
        if run_id is not None:
            if state is None or state.run is None or state.run.id != run_id:
                log.info("stale stop for run %s in %s ignored", run_id, conversation_key)
                return "stale"
            state.run.cancel(reason)
            return "stopped"
        if state is None or (state.run is None and not state.inbox):
            return "idle"
        if state.run is not None:
            state.run.cancel(reason)
        if state.inbox:
            state.dropping.extend(state.inbox.values())
            state.inbox.clear()
            state.drop_reason = reason
        return "stopped"

    async def wait(self, conversation_key: str) -> None:
        """Return once the conversation has no run in progress and its surfaces are shown."""
        while True:
            state = self._active.get(conversation_key)
            if state is not None:
                await state.done.wait()
                continue
            feeds = [
                f.finished for f in self._feeds.get(conversation_key, ()) if not f.finished.done()
            ]
            if not feeds:
                return
            await asyncio.wait(feeds)

    async def wait_all(self) -> None:
        while True:
            busy = set(self._active)
            busy |= {
                k for k, feeds in self._feeds.items() if any(not f.finished.done() for f in feeds)
            }
            if not busy:
                return
            for key in busy:
                await self.wait(key)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop every run and wait (bounded) for them to record their outcome. Messages still
        queued stay in the store's inbox; `recover()` answers them after the restart."""
        self._closing = True
        for task in list(self._background):
            task.cancel()
        for state in list(self._active.values()):
            if state.run is not None:
                state.run.cancel("Teammate is shutting down.")
        tasks = [s.task for s in self._active.values() if s.task is not None]
        waits: list[asyncio.Future[None]] = [*tasks]
        waits += [f.finished for feeds in self._feeds.values() for f in feeds]
        if waits:
            await asyncio.wait(waits, timeout=timeout_s)

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
        """After a restart: close runs a crash interrupted (history made replayable for
        good, and a `RunFinished` shown where each run was shown), then answer messages that
        were accepted but never delivered. Returns the runs recovered."""
        repairs: list[RunRecord] = []
        if self._instances.shared and not self._listening:
            self._listening = True
            self._spawn(self._listen())
            self._spawn(self._sweep())
        # Platforms retry a delivery for minutes, not days; a week of ids is plenty.
        await self.store.prune_deliveries(DELIVERY_MEMORY_S)
        busy: set[int] = set()  # conversations another live process is running
        leased: dict[int, str] = {}  # leases taken here to recover a dead instance's runs
        for run in await self.store.running_runs():
            if run.conversation_key in self._active:
                busy.add(run.conversation_id)
                continue
            if self._instances.shared:
                # Several instances: the run is orphaned iff its lease could be taken (its
                # holder died and the lease expired); only that one winner recovers it.
                if not await self._instances.acquire_lease(run.conversation_id):
                    busy.add(run.conversation_id)
                    continue
                leased[run.conversation_id] = run.conversation_key
                if run.id not in {r.id for r in await self.store.running_runs()}:
                    continue  # another survivor recovered it before this one got the lease
            elif owner_alive(run.owner):
                busy.add(run.conversation_id)
                continue
            repairs.append(run)
        # At once, bounded: each waits for its end to be shown (a platform call or a few).
        recovered = await _each_bounded(self._repair, repairs, REPAIRS_AT_ONCE)
        for conversation_id in await self.store.pending_conversations():
            if conversation_id in busy:
                continue
            conversation = (await self.store.load(conversation_id)).conversation
            if conversation.key in self._active:
                continue
            log.info("answering messages left in %s's inbox", conversation.key)
            self._start_driver(ConversationState(conversation), adopt=True)
            leased.pop(conversation_id, None)  # the driver holds (and releases) it now
        for conversation_id, key in leased.items():
            if key in self._active:
                continue  # a message came meanwhile: its driver holds the lease now
            await self._instances.release_lease(conversation_id)
        return recovered

    async def _repair(self, run: RunRecord) -> RunRecord:
        """Close a run its process left open (it died, or stalled past its lease): history
        made replayable for good, its end shown where it was shown, then the run closed.

        Shown before closed, like any run's end: a process that dies while showing it leaves
        the run open, and the next recovery shows it. That recovery reads the same history:
        nothing is answered in a conversation before its dead runs are closed (`recover()`
        starts drivers after its repairs, `_take_lease` repairs before answering, and a driver
        started meanwhile waits for the repairs of its conversation)."""
        repaired = asyncio.Event()
        self._repairing.setdefault(run.conversation_id, set()).add(repaired)
        try:
            return await self._close_dead_run(run)
        finally:
            repaired.set()
            waiting = self._repairing.get(run.conversation_id, set())
            waiting.discard(repaired)
            if not waiting:
                self._repairing.pop(run.conversation_id, None)

    async def _close_dead_run(self, run: RunRecord) -> RunRecord:
        loaded = await self.store.load(run.conversation_id)
        messages = [stored.message for stored in loaded.messages]
        answer = _final_answer(messages)
        outcome: RunOutcome
        if answer is not None:
            # It had answered (its reply is the last thing in history) and died showing it:
            # closed as done, and its answer shown where it was being shown.
            outcome, error = "done", None
            final_text, error_text = answer.text(), None
        else:
            for call_id, name in unanswered_tool_calls(messages):
                await self.store.append_message(
                    run.conversation_id, interrupted_result(call_id, name), run_id=run.id
                )
            outcome, error = "interrupted", "interrupted by a restart"
            final_text, error_text = "", INTERRUPTED_TEXT
        surface = self._surface_for(run.conversation_key, run.surface_ref)
        if surface is not None:
            feed = self._feed(run.conversation_key, surface, run_id=run.id)
            feed.put(
                RunFinished(
                    run.conversation_key, run.id, outcome, run.usage, final_text, error_text
                )
            )
            feed.close()
            try:
                await asyncio.wait_for(feed.wait(), FINAL_SHOWN_WAIT_S)
            except TimeoutError:
                log.warning("the end of recovered run %s is not shown yet; closing it", run.id)
        record = await self.store.finish_run(run.id, outcome, error=error)
        log.warning("run %s in %s was %s; repaired", run.id, run.conversation_key, record.outcome)
        return record

    async def _take_lease(self, conversation_id: int) -> bool:
        """Acquire the conversation's lease for a driver; False if another live instance holds
        it. Taken from a dead instance, the runs it left open there are closed first, before
        anything is answered: a later run would end history with its own answer, and the dead
        run's repair would show that one as its own."""
        if not await self._instances.acquire_lease(conversation_id):
            return False
        if self._instances.took_over(conversation_id):
            for run in await self.store.running_runs():
                if run.conversation_id == conversation_id:
                    await self._repair(run)
        return True

    # -- several instances -----------------------------------------------------------------

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _listen(self) -> None:
        """Act on what other instances tell this one, until the runner closes."""
        async for notice in self._instances.notifications():
            try:
                await self._on_notice(notice)
            except Exception:
                log.exception("could not act on %s", notice)

    async def _on_notice(self, notice: Notification) -> None:
        if isinstance(notice, NewInboxItem):
            state = self._active.get(notice.conversation_key)
            if state is not None and notice.item_id not in state.seen:
                await self._take_in(state)
        elif isinstance(notice, StopRequest):
            if notice.conversation_key in self._active:
                by = (
                    Author(id=notice.by_id, name=notice.by_name or notice.by_id)
                    if notice.by_id
                    else None
                )
                self.stop(notice.conversation_key, notice.run_id, by=by)
        elif isinstance(notice, LeaseLost):
            for state in list(self._active.values()):
                if state.conversation.id == notice.conversation_id:
                    if state.run is not None:
                        state.run.cancel(LEASE_LOST_TEXT)
                    self._hand_over(state)
        elif isinstance(notice, Resync):
            for state in list(self._active.values()):
                await self._take_in(state)

    async def _take_in(self, state: ConversationState) -> None:
        """Messages another instance accepted for a conversation this one runs: into the
        inbox, and steered into the current run as if they had arrived here."""
        key = state.conversation.key
        for item in await self.store.pending(state.conversation.id):
            if item.id in state.seen:
                continue
            state.seen.add(item.id)
            surface = self._surface_for(key, item.surface_ref)
            queued = Queued(item, self._feed(key, surface) if surface is not None else None)
            state.inbox[item.id] = queued
            if state.run is not None:
                state.run.steer(queued)

    def _hand_over(self, state: ConversationState) -> None:
        """Another instance holds the conversation: it answers what is queued here (the
        messages stay pending in the store); their senders are told they are queued."""
        for queued in state.inbox.values():
            self._acknowledge(queued, QUEUED_TEXT)
        state.inbox.clear()

    async def _sweep(self) -> None:
        """Take over what dead instances left: their runs and unanswered messages."""
        while not self._closing:
            await asyncio.sleep(min(TAKEOVER_SWEEP_S, self.settings.instance_lease_s / 2))
            try:
                await self.recover()
            except Exception:
                log.exception("looking for conversations left by dead instances failed")

    # -- one conversation's driver ---------------------------------------------------------

    def _start_driver(self, state: ConversationState, *, adopt: bool = False) -> None:
        key = state.conversation.key
        self._active[key] = state
        state.task = asyncio.create_task(self._drive(state, adopt), name=f"conversation:{key}")

    async def _drive(self, state: ConversationState, adopt: bool) -> None:
        key = state.conversation.key
        conversation_id = state.conversation.id
        leased = False
        try:
            if self._instances.shared:
                if not await self._take_lease(conversation_id):
                    self._hand_over(state)  # another instance runs it and was notified
                    return
                leased = adopt = True  # and answers what others left pending
            for repairing in list(self._repairing.get(conversation_id, ())):
                await repairing.wait()  # a dead run of this conversation is being closed
            if adopt:
                await self._adopt_pending(state)
            while True:
                if state.dropping:
                    try:
                        await self._drop(state, None)
                    except Exception:  # they stay pending in the store; recovery retries
                        log.exception("could not drop stopped messages in %s", key)
                    continue
                if leased and not state.inbox and not self._closing:
                    leased = False
                    await self._instances.release_lease(conversation_id)
                    # Another instance may have accepted a message while this one held the
                    # lease (and left it to us): look again now that anyone may take it.
                    if await self.store.pending(conversation_id) or state.inbox:
                        if await self._take_lease(conversation_id):
                            leased = True
                            await self._adopt_pending(state)
                        else:
                            self._hand_over(state)
                    continue
                if not state.inbox or self._closing:
                    # Nothing awaits between this check and leaving the map: a message
                    # accepted from now on starts a new driver.
                    del self._active[key]
                    break
                lead = next(iter(state.inbox.values())).author
                lead_id = lead.id if lead is not None else None
                async with self._slots.slot(state.conversation.channel_key, lead_id):
                    if state.inbox and not self._closing:  # (a stop may have emptied it)
                        await self._guarded_run(state, list(state.inbox.values()))
        except Exception:
            # Messages not yet delivered stay pending in the store; `recover()` answers them.
            log.exception("the driver of %s failed", key)
        finally:
            if self._active.get(key) is state:
                del self._active[key]
            # Left behind (shutting down, or the driver failed): they stay pending in the
            # store and `recover()` answers them on their own surfaces; these feeds are let
            # go, else `close()` and `wait()` would wait for an answer that never comes here.
            for queued in state.inbox.values():
                if queued.feed is not None:
                    queued.feed.close()
            if leased:
                try:
                    await self._instances.release_lease(conversation_id)
                except Exception:  # it expires on its own
                    log.exception("could not release the lease of %s", key)
            state.done.set()

    async def _adopt_pending(self, state: ConversationState) -> None:
        """Take in messages the store holds but this process does not know (accepted before a
        crash): at start-up, from `recover()`."""
        pending = await self.store.pending(state.conversation.id)
        known = set(state.inbox) | {queued.item.id for queued in state.dropping}
        missing = [item for item in pending if item.id not in known]
        if not missing:
            return
        merged = {item.id: Queued(item, None) for item in missing} | state.inbox
        state.inbox = dict(sorted(merged.items()))
        state.seen.update(state.inbox)
        for queued in state.inbox.values():  # the first's surface shows the follow-up run
            if queued.feed is None:
                surface = self._surface_for(state.conversation.key, queued.item.surface_ref)
                if surface is not None:
                    queued.feed = self._feed(state.conversation.key, surface)

    async def _guarded_run(self, state: ConversationState, batch: list[Queued]) -> None:
        lead = batch[0]
        key = state.conversation.key
        feed = lead.feed or self._feed(key, Unseen(lead.item.surface_ref))
        run = RunState(feed)
        state.run = run
        try:
            await self._run(state, run, batch)
        except Exception as exc:
            reference = new_reference()
            log.exception("run in %s failed (reference %s)", key, reference)
            error_text = (
                storage_failure_text(exc, reference, accepting=False)
                if is_storage_failure(exc)
                else unexpected_failure_text(reference)
            )
            usage = Usage()
            if run.id is not None:
                try:
                    record = await self.store.finish_run(
                        run.id, "error", error=f"unexpected failure {reference}"
                    )
                    usage = record.usage
                except Exception:
                    log.exception("could not record the failed run %s", run.id)
            finished = RunFinished(
                conversation_key=key,
                run_id=run.id or 0,
                outcome="error",
                usage=usage,
                final_text="",
                error_text=error_text,
                reference=reference,
            )
            run.feed.put(finished)
        finally:
            state.run = None
            run.feed.close()

    async def _run(self, state: ConversationState, run: RunState, batch: list[Queued]) -> None:
        conversation = state.conversation
        for queued in batch:  # this run's own messages: never steered, never dropped
            state.inbox.pop(queued.item.id, None)
        author = batch[0].author
        # What a channel admin set at run time, read for every run: a change applies to the
        # next run, and an unchanged one keeps the system prompt byte-identical.
        overrides = ChannelConfig.from_stored(
            await self.store.get_channel_config(conversation.channel_key)
        )
        model_id = overrides.model or self.settings.model_for(conversation.channel_key)
        retired = retired_model(model_id)
        if retired is not None:
            # Saved with /teammate config before it retired: answer with the deployment's model
            # (settings refuse a retired one at start-up) and say so, rather than fail.
            fallback = self.settings.model
            retired_text = RETIRED_MODEL_TEXT.format(
                model=model_id, date=retired.retired, fallback=fallback
            )
            model_id = fallback
        model = self._model(model_id)
        batch = await self._refuse_oversized(state, run, batch, model)
        if not batch:
            return
        record = await self.store.start_run(
            conversation.id,
            user_id=author.id if author else None,
            channel_key=conversation.channel_key,
            model=model.info.id,
            surface_ref=run.feed.ref,
            owner=OWNER,
            deliver=[q.item.id for q in batch],  # the run's own messages: one transaction
        )
        run.id = record.id
        run.feed.put(RunStarted(conversation.key, run.id, author))
        if retired is not None:
            run.feed.put(Notice(retired_text, "warning"))
        for queued in batch[1:]:
            self._acknowledge(queued, DELIVERED_TEXT)

        refusal = await budget_refusal(
            self.store, self.settings.budgets, conversation, author, self._clock()
        )
        if refusal is not None:
            record = await self.store.finish_run(run.id, "error", error=refusal)
            run.feed.put(self._finished(record, "", refusal))
            return

        loaded = await self.store.load(conversation.id)
        made = self._toolset_factory(conversation.channel_key)
        tools = list(await made if inspect.isawaitable(made) else made)
        if overrides.tools is not None:  # narrows only: never grants a tool
            tools = [tool for tool in tools if keeps_tool(overrides.tools, tool)]
        if self._channel_tools is not None:
            tools += self._channel_tools(conversation.channel_key)
        prompt = self._system_prompt(conversation.channel_key)
        # The channel's instructions and memory reach the model as a note appended when they
        # changed, never as an edit of what was sent (bots.prompt, "Preserved thinking").
        memory = ""
        if self.settings.memory.enabled:
            memory = memory_block(await self.store.memory_notes(conversation.channel_key))
        instructions = overrides.system_prompt
        if instructions is None:
            instructions = self.settings.channel(conversation.channel_key).system_prompt
        context_text = channel_context_text(instructions=instructions, memory=memory)
        loaded = await self._compact(conversation, loaded, model, force=False)
        messages = await self._with_context_note(conversation, run, loaded, context_text)
        config = LoopConfig(
            max_turns=self.settings.max_turns,
            max_tokens=self.settings.max_output_tokens,
            workspace=self._workspaces.path(conversation.channel_key),
            caller=author,
            conversation_key=conversation.key,
        )

        overflow_retried = False
        usage = Usage()  # what this run's replies cost (the store totals the same on finish)
        while True:
            control = run.new_control()
            run.accepting = True
            for queued in state.inbox.values():
                run.steer(queued)
            context = AgentContext(prompt, messages, tools)
            try:
                end = await self._stream_run(context, model, state, run, control, config)
            finally:
                run.accepting = False
            for added in end.messages:
                if isinstance(added, AssistantMessage):
                    usage = usage + added.usage
            last = _last_assistant(end.messages)
            overflowed = (
                end.reason == "error" and last is not None and last.error_kind == "context_overflow"
            )
            if not overflowed or overflow_retried:
                break
            overflow_retried = True
            run.feed.put(Notice("This conversation got long; summarising it.", "info"))
            # Reloaded: steering delivered before the overflow is in history now; what was
            # not delivered is still in the inbox and goes to the retry's fresh control.
            loaded = await self.store.load(conversation.id)
            loaded = await self._compact(conversation, loaded, model, force=True)
            messages = await self._with_context_note(conversation, run, loaded, context_text)

        outcome: RunOutcome
        error_text: str | None = None
        if end.reason == "stop":
            outcome = "done"
        elif end.reason == "turn_limit":
            outcome, error_text = "done", end.error_message
        elif end.reason == "aborted":
            outcome, error_text = "aborted", end.error_message
        else:
            outcome, error_text = "error", describe_model_error(last, end.error_message)
        if state.dropping:
            await self._drop(state, run.feed)
        final_text = last.text() if last is not None else ""
        run.feed.put(RunFinished(conversation.key, run.id, outcome, usage, final_text, error_text))
        # The end is shown before the run is closed in the store: killed in between, the run
        # is still "running" at the next start and `recover()` shows its end there (else it
        # would be closed and never shown). Bounded: a platform that is down delays only this
        # conversation's next run, by at most this long.
        run.feed.close()
        try:
            await asyncio.wait_for(run.feed.wait(), FINAL_SHOWN_WAIT_S)
        except TimeoutError:
            log.warning("the end of run %s is not shown yet; closing it anyway", run.id)
        await self.store.finish_run(run.id, outcome, error=end.error_message)

    async def _stream_run(
        self,
        context: AgentContext,
        model: Model,
        state: ConversationState,
        run: RunState,
        control: RunControl,
        config: LoopConfig,
    ) -> AgentEnd:
        """Run the loop: persist each message as it ends (before any surface shows it)."""
        conversation_id = state.conversation.id
        assert run.id is not None
        end: AgentEnd | None = None
        async for event in run_agent(context, model, control=control, config=config):
            if isinstance(event, MessageEnd):
                message = event.message
                if isinstance(message, AssistantMessage):  # with its usage: one transaction
                    await self.store.append_message(
                        conversation_id,
                        message,
                        run_id=run.id,
                        usage=message.usage,
                        model=model.info.id,
                    )
                elif isinstance(message, ToolResultMessage):
                    await self.store.append_message(conversation_id, message, run_id=run.id)
                else:
                    await self._delivered(state, run, message)
            elif isinstance(event, AgentEnd):
                end = event
            run.feed.put(event)
            if isinstance(event, ToolExecutionEnd):
                for file in await files_out(event.result, config.workspace):
                    run.feed.put(file)
        assert end is not None  # run_agent always ends with AgentEnd
        return end

    async def _delivered(self, state: ConversationState, run: RunState, message: Message) -> None:
        """The loop delivered a steered message: it enters history here, in that order."""
        queued = run.steered.get(id(message))
        if queued is None:
            log.warning("the loop delivered a message the runner did not steer; not stored")
            return
        state.inbox.pop(queued.item.id, None)
        if queued in state.dropping:  # stopped, but the loop had already taken it
            state.dropping.remove(queued)
        await self.store.deliver(state.conversation.id, [queued.item.id], run_id=run.id)
        self._acknowledge(queued, DELIVERED_TEXT)

    async def _drop(self, state: ConversationState, run_feed: SurfaceFeed | None) -> None:
        """Drop stopped messages for good and tell everyone which ones go unanswered."""
        dropped, state.dropping = state.dropping, []
        if not dropped:
            return
        reason = state.drop_reason
        await self.store.drop(state.conversation.id, [q.item.id for q in dropped], reason)
        if run_feed is not None:
            quotes = "; ".join(q.quote() for q in dropped)
            run_feed.put(
                Notice(
                    f"{reason} These messages will not be answered: {quotes}. "
                    "Send them again if you still need an answer.",
                    "warning",
                )
            )
        for queued in dropped:
            if queued.feed is not None and queued.feed is not run_feed:
                text = f"{reason} I won't answer {queued.quote()}; send it again if needed."
                queued.feed.put(Notice(text, "warning", audience=queued.author))
                queued.feed.close()

    async def _refuse_oversized(
        self, state: ConversationState, run: RunState, batch: list[Queued], model: Model
    ) -> list[Queued]:
        """Drop, with a clear note, each message that alone would not fit the model's context
        (a cheap estimate, before any model call): stored, it would fail every later run of
        the thread. Returns the rest of the batch."""
        room = model.info.context_window - self.settings.compaction.reserve_tokens
        room = max(room, model.info.context_window // 2)
        sizes = {q.item.id: compaction.estimate_tokens(q.item.message) for q in batch}
        oversized = [q for q in batch if sizes[q.item.id] > room]
        if not oversized:
            return batch
        await self.store.drop(
            state.conversation.id, [q.item.id for q in oversized], "too long for the model"
        )
        for queued in oversized:
            text = OVERSIZED_TEXT.format(tokens=sizes[queued.item.id], room=room)
            feed = queued.feed or run.feed
            feed.put(Notice(text, "warning", audience=queued.author))
            if feed is not run.feed:
                feed.close()
        return [q for q in batch if q not in oversized]

    def _acknowledge(self, queued: Queued, text: str) -> None:
        if queued.feed is not None:
            queued.feed.put(Notice(text, "info", audience=queued.author))
            queued.feed.close()

    # -- building blocks -------------------------------------------------------------------

    async def _compact(
        self, conversation: Conversation, loaded: LoadedConversation, model: Model, *, force: bool
    ) -> LoadedConversation:
        return await compaction.compact_if_needed(
            self.store, self.settings.compaction, conversation, loaded, model, force=force
        )

    def _model(self, model_id: str) -> Model:
        model = self._models.get(model_id)
        if model is None:
            model = self._model_factory(model_id)
            self._models[model_id] = model
        return model

    def _system_prompt(self, channel_key: str) -> str:
        return system_prompt(
            platform_rules=rules_for(self._platform_rules, channel_key),
            global_prompt=self.settings.system_prompt,
        )

    async def _with_context_note(
        self, conversation: Conversation, run: RunState, loaded: LoadedConversation, wanted: str
    ) -> list[Message]:
        """The messages the model sees, with a channel context note appended (and stored, so
        every later request replays the same bytes) when the channel's instructions or memory
        differ from the last note among them (a compaction may have summarised it away)."""
        messages = compaction.context_messages(loaded)
        note = channel_context_note(messages, wanted)
        if note is None:
            return messages
        assert run.id is not None
        await self.store.append_message(conversation.id, note, run_id=run.id)
        return [*messages, note]

    def _feed(self, key: str, surface: Surface, *, run_id: int | None = None) -> SurfaceFeed:
        feed = SurfaceFeed(surface, on_ref_change=self._ref_changed, name=key, run_id=run_id)
        feeds = self._feeds.setdefault(key, set())
        feeds.add(feed)

        def forget(_finished: asyncio.Future[None]) -> None:
            feeds.discard(feed)
            if not feeds and self._feeds.get(key) is feeds:
                del self._feeds[key]

        feed.finished.add_done_callback(forget)
        return feed

    async def _ref_changed(self, run_id: int, ref: dict[str, Any]) -> None:
        await self.store.set_run_surface_ref(run_id, ref)

    def _surface_for(self, key: str, ref: dict[str, Any]) -> Surface | None:
        if self._surfaces is None or not ref:
            return None
        try:
            return self._surfaces.for_ref(key, ref)
        except Exception:
            log.exception("no surface for %s", key)
            return None

    def _finished(self, record: RunRecord, final_text: str, error_text: str | None) -> RunFinished:
        return RunFinished(
            conversation_key=record.conversation_key,
            run_id=record.id,
            outcome=record.outcome,
            usage=record.usage,
            final_text=final_text,
            error_text=error_text,
        )


async def _each_bounded(
    work: Callable[[RunRecord], Awaitable[RunRecord]], runs: list[RunRecord], limit: int
) -> list[RunRecord]:
    """`work(run)` for every run, at most `limit` at once, results in order. Every one is
    carried through even if another fails; then the first failure is raised."""
    slots = asyncio.Semaphore(limit)

    async def one(run: RunRecord) -> RunRecord:
        async with slots:
            return await work(run)

    done = await asyncio.gather(*(one(run) for run in runs), return_exceptions=True)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
    return [outcome for outcome in done if not isinstance(outcome, BaseException)]


def _final_answer(messages: list[Message]) -> AssistantMessage | None:
    """The reply that ended a run, if history ends with one: no tool call left, no error."""
    last = messages[-1] if messages else None
    if (
        isinstance(last, AssistantMessage)
        and last.stop_reason == "stop"
        and last.error_kind is None
        and not last.tool_calls()
        and last.text().strip()
    ):
        return last
    return None


def _last_assistant(messages: list[Message]) -> AssistantMessage | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message
    return None
