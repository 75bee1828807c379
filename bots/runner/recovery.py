"""Recovery: runs a process left open are closed, and messages it left are answered.

Owns: `recover()`'s work (at start-up, and on every sweep with several instances): choosing the
runs to repair (their process died: its pid is gone on one machine, or its lease expired on a
shared database), repairing them a few at once (history made replayable for good, the end shown
where the run was shown, then the run closed), and starting a driver for each conversation with
messages accepted but never delivered. The repairs in progress, by conversation: nothing is
answered in a conversation before its dead runs are closed. (`bots.recovery` holds the
process's owner tag and the interrupted run's text.)

Must not: answer messages itself (drivers do), or repair a run another live process owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bots.inbox import ConversationState
from bots.recovery import INTERRUPTED_TEXT, owner_alive
from bots.runner.shared import FINAL_SHOWN_WAIT_S, Shared
from bots.surface.contract import RunFinished
from core.history import interrupted_result, unanswered_tool_calls
from core.messages import AssistantMessage, Message
from storage.base import Conversation, RunOutcome, RunRecord

__all__ = ["DELIVERY_MEMORY_S", "REPAIRS_AT_ONCE", "Recovery"]

log = logging.getLogger(__name__)

DELIVERY_MEMORY_S = 7 * 24 * 3600
REPAIRS_AT_ONCE = 16  # runs a recovery closes at once (each waits for its end to be shown)


class Recovery:
    """Closes the runs dead processes left open, and hands their inboxes to drivers."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        # Continues a run left waiting for approval (the drivers' `resume`, set by the runner).
        self.resume: Callable[[Conversation, RunRecord], None] | None = None
        # Runs being repaired here, by conversation: its driver answers nothing before they
        # are closed (see `repair`).
        self._repairing: dict[int, set[asyncio.Event]] = {}

    async def recover(self, adopt: Callable[[ConversationState], None]) -> list[RunRecord]:
        """Close runs a crash interrupted, then start a driver (`adopt`) for each conversation
        with messages accepted but never delivered. Returns the runs recovered."""
        store, instances, active = self._shared.store, self._shared.instances, self._shared.active
        repairs: list[RunRecord] = []
        resumable: list[RunRecord] = []  # waiting for approval: continued, not closed
        # Platforms retry a delivery for minutes, not days; a week of ids is plenty.
        await store.prune_deliveries(DELIVERY_MEMORY_S)
        busy: set[int] = set()  # conversations another live process is running
        leased: dict[int, str] = {}  # leases taken here to recover a dead instance's runs
        for run in await store.running_runs():
            if run.conversation_key in active:
                busy.add(run.conversation_id)
                continue
            if instances.shared:
                # Several instances: the run is orphaned iff its lease could be taken (its
                # holder died and the lease expired); only that one winner recovers it.
                if not await instances.acquire_lease(run.conversation_id):
                    busy.add(run.conversation_id)
                    continue
                leased[run.conversation_id] = run.conversation_key
                if run.id not in {r.id for r in await store.running_runs()}:
                    continue  # another survivor recovered it before this one got the lease
            elif owner_alive(run.owner):
                busy.add(run.conversation_id)
                continue
            if await self._waiting_for_approval(run):
                resumable.append(run)
                continue
            repairs.append(run)
        # At once, bounded: each waits for its end to be shown (a platform call or a few).
        recovered = await _each_bounded(self.repair, repairs, REPAIRS_AT_ONCE)
        for run in resumable:
            conversation = (await store.load(run.conversation_id)).conversation
            if self.resume is None or conversation.key in active:
                recovered.append(await self.repair(run))
                continue
            log.info("run %s in %s waits for approval; continued", run.id, run.conversation_key)
            self.resume(conversation, run)
            leased.pop(run.conversation_id, None)  # its driver holds (and releases) it now
        for conversation_id in await store.pending_conversations():
            if conversation_id in busy:
                continue
            conversation = (await store.load(conversation_id)).conversation
            if conversation.key in active:
                continue
            log.info("answering messages left in %s's inbox", conversation.key)
            adopt(ConversationState(conversation))
            leased.pop(conversation_id, None)  # the driver holds (and releases) it now
        for conversation_id, key in leased.items():
            if key in active:
                continue  # a message came meanwhile: its driver holds the lease now
            await instances.release_lease(conversation_id)
        return recovered

    async def repair_open_runs(self, conversation_id: int) -> RunRecord | None:
        """Repair every run still open in the conversation (its lease was just taken over from
        a dead instance), but one left waiting for approval: returned, for the driver that
        took the lease to continue."""
        waiting: RunRecord | None = None
        for run in await self._shared.store.running_runs():
            if run.conversation_id != conversation_id:
                continue
            if waiting is None and await self._waiting_for_approval(run):
                waiting = run
            else:
                await self.repair(run)
        return waiting

    async def repaired(self, conversation_id: int) -> None:
        """Return once no run of the conversation is being repaired here."""
        for repairing in list(self._repairing.get(conversation_id, ())):
            await repairing.wait()

    async def _waiting_for_approval(self, run: RunRecord) -> bool:
        return any(r.pending for r in await self._shared.store.run_approvals(run.id))

    async def repair(self, run: RunRecord) -> RunRecord:
        """Close a run its process left open (it died, or stalled past its lease): history
        made replayable for good, its end shown where it was shown, then the run closed.

        Shown before closed, like any run's end: a process that dies while showing it leaves
        the run open, and the next recovery shows it. That recovery reads the same history:
        nothing is answered in a conversation before its dead runs are closed (`recover()`
        starts drivers after its repairs, a driver taking over a lease repairs before
        answering, and a driver started meanwhile waits for the repairs of its conversation)."""
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
        store = self._shared.store
        fence = self._shared.instances.fence(run.conversation_id)  # the lease taken for it
        loaded = await store.load(run.conversation_id)
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
                await store.append_message(
                    run.conversation_id,
                    interrupted_result(call_id, name),
                    run_id=run.id,
                    fence=fence,
                )
            outcome, error = "interrupted", "interrupted by a restart"
            final_text, error_text = "", INTERRUPTED_TEXT
        surface = self._shared.surface_for(run.conversation_key, run.surface_ref)
        if surface is not None:
            feed = self._shared.feed(run.conversation_key, surface, run_id=run.id)
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
        record = await store.finish_run(run.id, outcome, error=error, fence=fence)
        log.warning("run %s in %s was %s; repaired", run.id, run.conversation_key, record.outcome)
        return record


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
