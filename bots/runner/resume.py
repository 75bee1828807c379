"""A run continued after a restart: it was waiting for a person's approval when its process
died (or its instance's lease was taken over), and goes on from its stored tool calls.

Owns: `ResumedRun` (a `Run` that adopts its open record instead of starting one, and hands the
loop its stored reply whose calls never ran: the loop asks the gate again, which finds the
stored requests, so a decision made meanwhile stands and the model is not asked again) and
`resume_run`, the guard around it (an unexpected failure is recorded and shown with a
reference, never raised). docs/architecture.md, "Approvals".

Must not: choose which runs are resumed (bots.runner.recovery does), render, or write SQL.
"""

from __future__ import annotations

import logging

from bots import compaction
from bots.errors import new_reference, unexpected_failure_text
from bots.inbox import ConversationState, RunState, Unseen
from bots.runner.run import Run, Runs
from bots.settings import ChannelConfig
from bots.surface.contract import RunFinished, RunStarted
from core.history import unanswered_tool_calls
from core.messages import AssistantMessage, Author, Message
from core.models.base import Model
from storage.base import FencedOut, LoadedConversation, RunRecord

__all__ = ["ResumedRun", "resume_run"]

log = logging.getLogger(__name__)


class ResumedRun(Run):
    """A run whose record is open and whose last stored reply has calls that never ran."""

    def __init__(
        self, runs: Runs, state: ConversationState, run: RunState, record: RunRecord
    ) -> None:
        super().__init__(runs, state, run, [])
        self._record = record
        self._author = Author(id=record.user_id, name=record.user_id) if record.user_id else None
        self._resumed_once = False

    async def answer(self) -> None:
        model = await self._adopt()
        end, last = await self._loop(model)
        await self._end(end, last)

    async def _adopt(self) -> Model:
        record, conversation = self._record, self._conversation
        self._fence.check("resuming a run")
        self._overrides = ChannelConfig.from_stored(
            await self._store.get_channel_config(conversation.channel_key)
        )
        self._run.id = record.id
        self._shared.fence_refs(record.id, self._fence.token, self._run.feed)
        self._run.feed.put(RunStarted(conversation.key, record.id, self._author))
        approvals = await self._store.run_approvals(record.id)
        name = next((a.request.get("asker_name") for a in approvals if a.request), None)
        if self._author is not None and isinstance(name, str) and name:
            self._author = Author(id=self._author.id, name=name)
        model_id = record.model or self._settings.model_for(conversation.channel_key)
        return self._runs.model(model_id)

    async def _compact(
        self, loaded: LoadedConversation, model: Model, *, force: bool
    ) -> LoadedConversation:
        return loaded  # the stored calls stay where they are: nothing is summarised now

    async def _with_context_note(self, loaded: LoadedConversation, wanted: str) -> list[Message]:
        """The history up to the reply whose calls never ran; that reply is the loop's to
        resume (once: an overflow's retry does not run the calls again)."""
        messages = compaction.context_messages(loaded)
        last = messages[-1] if messages else None
        if (
            not self._resumed_once
            and isinstance(last, AssistantMessage)
            and unanswered_tool_calls([last])
        ):
            self._resumed_once = True
            self._resume = last
            return messages[:-1]
        self._resume = None
        return messages


async def resume_run(runs: Runs, state: ConversationState, record: RunRecord) -> None:
    """Continue `record` in this driver; never raises for what the run meets."""
    shared = runs.shared
    key = state.conversation.key
    surface = shared.surface_for(key, record.surface_ref) or Unseen(record.surface_ref)
    run = RunState(shared.feed(key, surface, run_id=record.id))
    state.run = run
    try:
        await ResumedRun(runs, state, run, record).answer()
    except FencedOut as exc:
        log.warning("resumed run %s in %s stopped: %s", record.id, key, exc)
        run.feed.abandon()
        state.lease_lost = True
    except Exception:
        reference = new_reference()
        log.exception("resumed run %s in %s failed (reference %s)", record.id, key, reference)
        try:
            finished = await shared.store.finish_run(record.id, "error", error=reference)
            usage = finished.usage
        except Exception:
            log.exception("could not record the failed run %s", record.id)
            usage = record.usage
        run.feed.put(
            RunFinished(key, record.id, "error", usage, "", unexpected_failure_text(reference))
        )
    finally:
        state.run = None
        run.feed.close()
