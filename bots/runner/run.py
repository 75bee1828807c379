"""One run: a batch of a conversation's messages answered, from its record to its end.

Owns: `Runs`, what every run draws on (the model cache, the toolsets, the system prompt) and
the guard around each run (an unexpected failure is recorded and shown with a reference), and
`Run`, built fresh for each run: the channel's stored configuration read, messages too long
for the model refused, the run record started with its own messages delivered, the budgets,
the context assembled (tools, system prompt, compaction, and the channel context note with the
channel's instructions and memory), the loop streamed (each message stored as it ends, steered
messages entering history as the loop delivers them), one retry after a context overflow, and
the end: shown first, then the run closed in the store.

Must not: choose which messages make a batch or when a run starts (the driver does), take
leases, or see platform payloads.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from bots import compaction
from bots.attachments import files_out
from bots.budgets import budget_refusal
from bots.errors import (
    describe_model_error,
    is_storage_failure,
    new_reference,
    storage_failure_text,
    unexpected_failure_text,
)
from bots.features.channel_config import keeps_tool
from bots.features.memory import memory_block
from bots.inbox import ConversationState, Queued, RunState, Unseen
from bots.prompt import (
    PlatformRules,
    channel_context_note,
    channel_context_text,
    rules_for,
    system_prompt,
)
from bots.recovery import OWNER
from bots.runner.approval_gate import approval_gate as gate_of
from bots.runner.fencing import FencedModel, RunFence, fenced_tools
from bots.runner.shared import FINAL_SHOWN_WAIT_S, Shared, acknowledge
from bots.runner.texts import (
    DELIVERED_TEXT,
    LEASE_LOST_TEXT,
    OVERSIZED_TEXT,
    RETIRED_MODEL_TEXT,
    SUMMARISING_TEXT,
)
from bots.settings import ChannelConfig
from bots.surface.contract import Notice, RunFinished, RunStarted
from core.events import AgentEnd, MessageEnd, ToolExecutionEnd
from core.loop import AgentContext, LoopConfig, RunControl, run_agent
from core.messages import AssistantMessage, Message, ToolResultMessage, Usage
from core.models.base import Model
from core.models.catalog import retired_model
from core.tools import AnyTool
from storage.base import FencedOut, LoadedConversation, RunOutcome, RunRecord

__all__ = ["Run", "Runs"]

log = logging.getLogger(__name__)

ToolsetFactory = Callable[[str], Sequence[AnyTool] | Awaitable[Sequence[AnyTool]]]


class Runs:
    """What every run of one runner draws on, and the guard around each run."""

    def __init__(
        self,
        shared: Shared,
        *,
        model_factory: Callable[[str], Model],
        toolset_factory: ToolsetFactory,
        platform_rules: PlatformRules,
        clock: Callable[[], float] = time.time,
        channel_tools: Callable[[str], Sequence[AnyTool]] | None = None,
    ) -> None:
        self.shared = shared
        self.clock = clock
        # May be async (MCP tools: tools.mcp), never waiting long (see there).
        self.toolset_factory = toolset_factory
        # Bound to the run's channel (memory, schedules): no stored tool list narrows them.
        self.channel_tools = channel_tools
        self._model_factory = model_factory
        self._platform_rules = platform_rules
        self._models: dict[str, Model] = {}

    def model(self, model_id: str) -> Model:
        """One model object per id for the process (its clients and caches are reused)."""
        model = self._models.get(model_id)
        if model is None:
            model = self._model_factory(model_id)
            self._models[model_id] = model
        return model

    def system_prompt(self, channel_key: str) -> str:
        return system_prompt(
            platform_rules=rules_for(self._platform_rules, channel_key),
            global_prompt=self.shared.settings.system_prompt,
        )

    async def run(self, state: ConversationState, batch: list[Queued]) -> None:
        """Answer `batch` (the inbox's first messages) in a run of its own; an unexpected
        failure is logged, recorded and shown with a reference, never raised."""
        lead = batch[0]
        key = state.conversation.key
        feed = lead.feed or self.shared.feed(key, Unseen(lead.item.surface_ref))
        run = RunState(feed)
        state.run = run
        attempt = Run(self, state, run, batch)
        try:
            await attempt.answer()
        except FencedOut as exc:
            # Another instance owns the conversation now and shows what became of this run
            # there: nothing is shown or stored from here (the driver lets the lease go).
            log.warning("run %s in %s stopped: %s", run.id, key, exc)
            run.fence_out(LEASE_LOST_TEXT)  # (a refused write: the loop may still be going)
            run.feed.abandon()
            state.lease_lost = True
            for queued in attempt.taken:  # not started: they stay pending for the new holder
                if queued.feed is not None and queued.feed is not run.feed:
                    queued.feed.close()
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
                    record = await self.shared.store.finish_run(
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
            if run.id is None:
                await self._not_started(state, lead, attempt.taken)
        finally:
            state.run = None
            run.feed.close()

    async def _not_started(
        self, state: ConversationState, lead: Queued, taken: list[Queued]
    ) -> None:
        """The run failed before its record was made, so none of the messages it took off
        the inbox was delivered: the lead, told of the failure, is dropped (best effort: if
        the store still fails, a restart answers it); the others go back to the front of the
        inbox, in order, for the next run, so none is left pending until a restart."""
        rest = {q.item.id: q for q in taken if q is not lead}
        state.inbox = rest | state.inbox
        if lead not in taken:
            return
        try:
            await self.shared.store.drop(
                state.conversation.id, [lead.item.id], "its run could not start"
            )
        except Exception:
            log.exception("could not drop message %s after its run failed", lead.item.id)


class Run:
    """One run, built for it alone: everything it learns lives here and dies with it."""

    def __init__(
        self, runs: Runs, state: ConversationState, run: RunState, batch: list[Queued]
    ) -> None:
        self._runs = runs
        self._shared = runs.shared
        self._store = runs.shared.store
        self._settings = runs.shared.settings
        self._state = state
        self._run = run
        self._batch = batch
        self._conversation = state.conversation
        self._author = batch[0].author if batch else None
        self._usage = Usage()  # what this run's replies cost (the store totals the same)
        self._overrides: ChannelConfig  # what the channel's admin set, read as the run starts
        # The lease the driver holds (several instances): every write carries it.
        self._fence = RunFence(
            runs.shared.instances, run, runs.shared.instances.fence(state.conversation.id)
        )
        # Taken off the inbox, neither delivered nor dropped yet (`Runs` puts them back if
        # the run fails before its record is made).
        self.taken: list[Queued] = []
        self._resume: AssistantMessage | None = None  # its calls run first (bots.runner.resume)

    async def answer(self) -> None:
        model = await self._start()
        if model is None or await self._refused_by_budget():
            return
        end, last = await self._loop(model)
        await self._end(end, last)

    async def _start(self) -> Model | None:
        """Read what the channel's admin set, refuse what cannot fit, and open the run record
        with the batch delivered in the same transaction. None: nothing is left to answer."""
        conversation, state, run = self._conversation, self._state, self._run
        self._fence.check("starting a run")
        for queued in self._batch:  # this run's own messages: never steered, never dropped
            state.inbox.pop(queued.item.id, None)
        self.taken = list(self._batch)
        # What a channel admin set at run time, read for every run: a change applies to the
        # next run, and an unchanged one keeps the system prompt byte-identical.
        self._overrides = ChannelConfig.from_stored(
            await self._store.get_channel_config(conversation.channel_key)
        )
        model_id = self._overrides.model or self._settings.model_for(conversation.channel_key)
        retired = retired_model(model_id)
        retired_text = ""
        if retired is not None:
            # Saved with /teammate config before it retired: answer with the deployment's model
            # (settings refuse a retired one at start-up) and say so, rather than fail.
            fallback = self._settings.model
            retired_text = RETIRED_MODEL_TEXT.format(
                model=model_id, date=retired.retired, fallback=fallback
            )
            model_id = fallback
        model = self._runs.model(model_id)
        batch = await self._refuse_oversized(model)
        self.taken = batch
        if not batch:
            return None
        record = await self._store.start_run(
            conversation.id,
            fence=self._fence.token,
            user_id=self._author.id if self._author else None,
            channel_key=conversation.channel_key,
            model=model.info.id,
            surface_ref=run.feed.ref,
            owner=OWNER,
            deliver=[q.item.id for q in batch],  # the run's own messages: one transaction
        )
        run.id = record.id
        self.taken = []
        self._shared.fence_refs(run.id, self._fence.token, run.feed)
        run.feed.put(RunStarted(conversation.key, run.id, self._author))
        if retired is not None:
            run.feed.put(Notice(retired_text, "warning"))
        for queued in batch[1:]:
            acknowledge(queued, DELIVERED_TEXT, "read")
        return model

    async def _refused_by_budget(self) -> bool:
        refusal = await budget_refusal(
            self._store,
            self._settings.budgets,
            self._conversation,
            self._author,
            self._runs.clock(),
        )
        if refusal is None:
            return False
        assert self._run.id is not None
        record = await self._store.finish_run(
            self._run.id, "error", error=refusal, fence=self._fence.token
        )
        self._run.feed.put(_finished(record, "", refusal))
        return True

    async def _loop(self, model: Model) -> tuple[AgentEnd, AssistantMessage | None]:
        """Assemble the context and run the loop; after a context overflow, compact and try
        once more."""
        conversation, state, run = self._conversation, self._state, self._run
        loaded = await self._store.load(conversation.id)
        made = self._runs.toolset_factory(conversation.channel_key)
        tools = list(await made if inspect.isawaitable(made) else made)
        if self._overrides.tools is not None:  # narrows only: never grants a tool
            tools = [tool for tool in tools if keeps_tool(self._overrides.tools, tool)]
        if self._runs.channel_tools is not None:
            tools += self._runs.channel_tools(conversation.channel_key)
        tools = fenced_tools(tools, self._fence)
        prompt = self._runs.system_prompt(conversation.channel_key)
        # Instructions and memory: a note appended on change (bots.prompt, "Preserved thinking").
        memory = ""
        if self._settings.memory.enabled:
            memory = memory_block(await self._store.memory_notes(conversation.channel_key))
        instructions = self._overrides.system_prompt
        if instructions is None:
            instructions = self._settings.channel(conversation.channel_key).system_prompt
        context_text = channel_context_text(instructions=instructions, memory=memory)
        loaded = await self._compact(loaded, model, force=False)
        messages = await self._with_context_note(loaded, context_text)
        config = LoopConfig(
            max_turns=self._settings.max_turns,
            max_tokens=self._settings.max_output_tokens,
            workspace=self._shared.workspaces.path(conversation.channel_key),
            caller=self._author,
            conversation_key=conversation.key,
            before_tool_calls=gate_of(
                self._shared, conversation, run, self._author, tools, self._overrides
            ),
        )
        overflow_retried = False
        while True:
            control = run.new_control()
            run.accepting = True
            for queued in state.inbox.values():
                run.steer(queued)
            context = AgentContext(prompt, messages, tools, self._resume)
            try:
                end = await self._stream(context, FencedModel(model, self._fence), control, config)
            finally:
                run.accepting = False
            for added in end.messages:
                if isinstance(added, AssistantMessage):
                    self._usage = self._usage + added.usage
            last = _last_assistant(end.messages)
            overflowed = (
                end.reason == "error" and last is not None and last.error_kind == "context_overflow"
            )
            if not overflowed or overflow_retried:
                return end, last
            overflow_retried = True
            run.feed.put(Notice(SUMMARISING_TEXT, "info"))
            # Reloaded: steering delivered before the overflow is in history now; what was
            # not delivered is still in the inbox and goes to the retry's fresh control.
            loaded = await self._store.load(conversation.id)
            loaded = await self._compact(loaded, model, force=True)
            messages = await self._with_context_note(loaded, context_text)

    async def _end(self, end: AgentEnd, last: AssistantMessage | None) -> None:
        """Show the run's end, then close the run in the store."""
        state, run = self._state, self._run
        assert run.id is not None
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
        self._fence.check("showing the end")  # else it would show over another's
        if state.dropping:
            await self._shared.drop(state, run.feed, self._fence.token)
        final_text = last.text() if last is not None else ""
        run.feed.put(
            RunFinished(
                self._conversation.key, run.id, outcome, self._usage, final_text, error_text
            )
        )
        # Shown before the run is closed: killed in between, `recover()` shows its end at the
        # next start. Bounded: a platform that is down delays only this conversation's next run.
        run.feed.close()
        try:
            await asyncio.wait_for(run.feed.wait(), FINAL_SHOWN_WAIT_S)
        except TimeoutError:
            log.warning("the end of run %s is not shown yet; closing it anyway", run.id)
        await self._store.finish_run(
            run.id, outcome, error=end.error_message, fence=self._fence.token
        )

    async def _stream(
        self, context: AgentContext, model: Model, control: RunControl, config: LoopConfig
    ) -> AgentEnd:
        """Run the loop: persist each message as it ends (before any surface shows it)."""
        conversation_id = self._conversation.id
        run = self._run
        assert run.id is not None
        end: AgentEnd | None = None
        fence = self._fence.token
        async for event in run_agent(context, model, control=control, config=config):
            # Neither stored nor shown once the lease may be another's (leaving this loop
            # cancels the run's own task).
            self._fence.check("storing and showing")
            if isinstance(event, MessageEnd):
                message = event.message
                if isinstance(message, AssistantMessage):  # with its usage: one transaction
                    await self._store.append_message(
                        conversation_id,
                        message,
                        run_id=run.id,
                        usage=message.usage,
                        model=model.info.id,
                        fence=fence,
                    )
                elif isinstance(message, ToolResultMessage):
                    await self._store.append_message(
                        conversation_id, message, run_id=run.id, fence=fence
                    )
                else:
                    await self._delivered(message)
            elif isinstance(event, AgentEnd):
                end = event
            run.feed.put(event)
            if isinstance(event, ToolExecutionEnd):
                for file in await files_out(event.result, config.workspace):
                    run.feed.put(file)
        assert end is not None  # run_agent always ends with AgentEnd
        return end

    async def _delivered(self, message: Message) -> None:
        """The loop delivered a steered message: it enters history here, in that order."""
        state, run = self._state, self._run
        queued = run.steered.get(id(message))
        if queued is None:
            log.warning("the loop delivered a message the runner did not steer; not stored")
            return
        state.inbox.pop(queued.item.id, None)
        if queued in state.dropping:  # stopped, but the loop had already taken it
            state.dropping.remove(queued)
        await self._store.deliver(
            state.conversation.id, [queued.item.id], run_id=run.id, fence=self._fence.token
        )
        acknowledge(queued, DELIVERED_TEXT, "read")

    async def _refuse_oversized(self, model: Model) -> list[Queued]:
        """Drop, with a clear note, each message that alone would not fit the model's context
        (a cheap estimate, before any model call): stored, it would fail every later run of
        the thread. Returns the rest of the batch."""
        batch, run = self._batch, self._run
        room = model.info.context_window - self._settings.compaction.reserve_tokens
        room = max(room, model.info.context_window // 2)
        sizes = {q.item.id: compaction.estimate_tokens(q.item.message) for q in batch}
        oversized = [q for q in batch if sizes[q.item.id] > room]
        if not oversized:
            return batch
        await self._store.drop(
            self._conversation.id,
            [q.item.id for q in oversized],
            "too long for the model",
            fence=self._fence.token,
        )
        for queued in oversized:
            text = OVERSIZED_TEXT.format(tokens=sizes[queued.item.id], room=room)
            feed = queued.feed or run.feed
            feed.put(Notice(text, "warning", audience=queued.author))
            if feed is not run.feed:
                feed.close()
        return [q for q in batch if q not in oversized]

    async def _compact(
        self, loaded: LoadedConversation, model: Model, *, force: bool
    ) -> LoadedConversation:
        self._fence.check("compacting")
        compacted = await compaction.compact_if_needed(
            self._store,
            self._settings.compaction,
            self._conversation,
            loaded,
            FencedModel(model, self._fence),  # the summary's model call is checked too
            force=force,
            fence=self._fence.token,
        )
        if compacted is not loaded and self._shared.traces is not None and self._run.id:
            self._shared.traces.compacted(self._run.id, compacted.compaction, forced=force)
        return compacted

    async def _with_context_note(self, loaded: LoadedConversation, wanted: str) -> list[Message]:
        """The messages the model sees, with a channel context note appended (and stored, so
        every later request replays the same bytes) when the channel's instructions or memory
        differ from the last note among them (a compaction may have summarised it away)."""
        messages = compaction.context_messages(loaded)
        note = channel_context_note(messages, wanted)
        if note is None:
            return messages
        assert self._run.id is not None
        await self._store.append_message(
            self._conversation.id, note, run_id=self._run.id, fence=self._fence.token
        )
        return [*messages, note]


def _finished(record: RunRecord, final_text: str, error_text: str | None) -> RunFinished:
    """The end of a recorded run, as surfaces show it."""
    return RunFinished(
        conversation_key=record.conversation_key,
        run_id=record.id,
        outcome=record.outcome,
        usage=record.usage,
        final_text=final_text,
        error_text=error_text,
    )


def _last_assistant(messages: list[Message]) -> AssistantMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)
