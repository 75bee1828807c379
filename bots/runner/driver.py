"""The drivers: one task per conversation, draining its inbox run after run.

Owns: joining an accepted message to its conversation's driver or starting one (one step, no
await in it), stopping a conversation's work here (its run, and the messages queued behind it),
the driver's loop (repairs waited for, messages left in the store adopted, a run slot taken per
run, messages a stop took off the inbox dropped), the conversation's lease (taken before
anything is answered, released when the inbox is empty, looked at again after) and handing
the inbox over when another instance holds it. A driver leaves only when its inbox is empty,
in the same step as it leaves the active map, so no message can slip in between.

Must not: run the loop or touch a run's record (`bots.runner.run`), or close dead runs itself
(`bots.runner.recovery`).
"""

from __future__ import annotations

import asyncio
import logging

from bots.fairness import RunSlots
from bots.inbox import ConversationState, Queued
from bots.runner.recovery import Recovery
from bots.runner.resume import resume_run
from bots.runner.run import Runs
from bots.runner.shared import Shared, StopResult, SubmitResult, acknowledge
from bots.runner.texts import QUEUED_TEXT
from bots.surface.contract import Notice, Surface
from storage.base import Accepted, Conversation, RunRecord

__all__ = ["Drivers"]

log = logging.getLogger(__name__)


class Drivers:
    """Every conversation's driver in this process."""

    def __init__(self, shared: Shared, runs: Runs, recovery: Recovery) -> None:
        self._shared = shared
        self._runs = runs
        self._recovery = recovery
        settings = shared.settings
        self._slots = RunSlots(
            total=settings.max_concurrent_runs,
            per_channel=settings.max_runs_per_channel,
            per_user=settings.max_runs_per_user,
        )

    def enqueue(self, accepted: Accepted, surface: Surface) -> SubmitResult:
        """Join the conversation's driver, or start one: one step, with no await in it."""
        key = accepted.conversation.key
        feed = self._shared.feed(key, surface)
        queued = Queued(accepted.item, feed)
        state = self._shared.active.get(key)
        if state is None:
            state = ConversationState(accepted.conversation)
            state.inbox[accepted.item.id] = queued
            state.seen.add(accepted.item.id)
            self.start(state)
            return "started"
        if accepted.item.id not in state.seen:  # (else already taken in from the store)
            state.seen.add(accepted.item.id)
            state.inbox[accepted.item.id] = queued
            if state.run is not None:
                state.run.steer(queued)
        feed.put(Notice(QUEUED_TEXT, "info", audience=queued.author, ack="queued"))
        return "steered"

    def stop(self, conversation_key: str, run_id: int | None, reason: str) -> StopResult:
        """Stop work on a conversation driven here (`ConversationRunner.stop` says how)."""
        state = self._shared.active.get(conversation_key)
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

    def hand_over(self, state: ConversationState) -> None:
        """Another instance holds the conversation: it answers what is queued here (the
        messages stay pending in the store); their senders are told they are queued."""
        for queued in state.inbox.values():
            acknowledge(queued, QUEUED_TEXT, "queued")
        state.inbox.clear()

    def let_go(self, state: ConversationState) -> None:
        """A run here was fenced out: another instance owns the conversation (or may, by
        this one's clock), and answers what is pending. The lease is let lapse, not handed
        back: the run it stopped is still open in the store, and whoever takes the lease next
        (this instance too) closes it first. Nothing is said: the messages are not dropped,
        and their senders were told they are queued when they arrived."""
        self._shared.instances.let_lapse(state.conversation.id)
        for queued in [*state.inbox.values(), *state.dropping]:
            if queued.feed is not None:
                queued.feed.close()
        state.inbox.clear()
        state.dropping.clear()

    def resume(self, conversation: Conversation, record: RunRecord) -> None:
        """Start a driver that first continues `record`, a run left waiting for approval
        by a process that died, then answers what the store holds for the conversation."""
        state = ConversationState(conversation)
        state.resume = record
        self.start(state, adopt=True)

    def adopt(self, state: ConversationState) -> None:
        """Start a driver that first takes in what the store holds for the conversation."""
        self.start(state, adopt=True)

    def start(self, state: ConversationState, *, adopt: bool = False) -> None:
        key = state.conversation.key
        self._shared.active[key] = state
        state.task = asyncio.create_task(self._drive(state, adopt), name=f"conversation:{key}")

    async def _drive(self, state: ConversationState, adopt: bool) -> None:
        shared = self._shared
        instances = shared.instances
        key = state.conversation.key
        conversation_id = state.conversation.id
        leased = False
        try:
            if instances.shared:
                if not await self._take_lease(state):
                    self.hand_over(state)  # another instance runs it and was notified
                    return
                leased = adopt = True  # and answers what others left pending
            await self._recovery.repaired(conversation_id)  # a dead run of it is being closed
            if adopt:
                await self._adopt_pending(state)
            while True:
                if state.dropping:
                    try:
                        await shared.drop(state, None, instances.fence(conversation_id))
                    except Exception:
                        # They stay pending in the store, out of this inbox: the next recovery
                        # answers them (it does not know they were stopped).
                        log.exception("could not drop stopped messages in %s", key)
                    continue
                if state.resume is not None and not shared.closing:
                    record, state.resume = state.resume, None
                    await resume_run(self._runs, state, record)
                    continue
                if leased and not state.inbox and not shared.closing:
                    leased = False
                    await instances.release_lease(conversation_id)
                    # Another instance may have accepted a message while this one held the
                    # lease (and left it to us): look again now that anyone may take it.
                    if await shared.store.pending(conversation_id) or state.inbox:
                        if await self._take_lease(state):
                            leased = True
                            await self._adopt_pending(state)
                        else:
                            self.hand_over(state)
                    continue
                if not state.inbox or shared.closing:
                    # Nothing awaits between this check and leaving the map: a message
                    # accepted from now on starts a new driver.
                    del shared.active[key]
                    break
                lead = next(iter(state.inbox.values())).author
                lead_id = lead.id if lead is not None else None
                async with self._slots.slot(state.conversation.channel_key, lead_id):
                    if state.inbox and not shared.closing:  # (a stop may have emptied it)
                        await self._runs.run(state, list(state.inbox.values()))
                if state.lease_lost:
                    leased = False  # let lapse, not released: see `let_go`
                    self.let_go(state)
        except Exception:
            # Messages not yet delivered stay pending in the store: the next `recover()`
            # answers them (at the next start-up; with several instances, the next sweep).
            log.exception("the driver of %s failed", key)
        finally:
            if shared.active.get(key) is state:
                del shared.active[key]
            # Left behind (shutting down, or the driver failed): they stay pending in the
            # store and the next `recover()` answers them on their own surfaces; these feeds
            # are let go, else `close()` and `wait()` would wait for an answer that never
            # comes here.
            for queued in state.inbox.values():
                if queued.feed is not None:
                    queued.feed.close()
            if leased:
                try:
                    await instances.release_lease(conversation_id)
                except Exception:  # it expires on its own
                    log.exception("could not release the lease of %s", key)
            state.done.set()

    async def _take_lease(self, state: ConversationState) -> bool:
        """Acquire the conversation's lease for a driver; False if another live instance holds
        it. Taken from a dead instance, the runs it left open there are closed first, before
        anything is answered: a later run would end history with its own answer, and the dead
        run's repair would show that one as its own."""
        instances = self._shared.instances
        conversation_id = state.conversation.id
        if not await instances.acquire_lease(conversation_id):
            return False
        if instances.took_over(conversation_id):
            waiting = await self._recovery.repair_open_runs(conversation_id)
            if waiting is not None:  # left waiting for approval: continued here, first
                state.resume = waiting
        return True

    async def _adopt_pending(self, state: ConversationState) -> None:
        """Take in messages the store holds but this driver does not know: accepted before a
        crash (a driver `recover()` starts), or by another instance (a leased driver)."""
        shared = self._shared
        pending = await shared.store.pending(state.conversation.id)
        known = set(state.inbox) | {queued.item.id for queued in state.dropping}
        missing = [item for item in pending if item.id not in known]
        if not missing:
            return
        merged = {item.id: Queued(item, None) for item in missing} | state.inbox
        state.inbox = dict(sorted(merged.items()))
        state.seen.update(state.inbox)
        for queued in state.inbox.values():  # the first's surface shows the follow-up run
            if queued.feed is None:
                surface = shared.surface_for(state.conversation.key, queued.item.surface_ref)
                if surface is not None:
                    queued.feed = shared.feed(state.conversation.key, surface)
