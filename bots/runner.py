"""The conversation runner every adapter shares (DESIGN.md §2, §5).

Owns: turning an `Incoming` into a persisted, attributed, serialised agent run whose events
reach a `Surface`. Concretely: durable de-duplication by delivery id; the user message committed
before anything else; one run per conversation (later messages steered into it), any number of
conversations at once; every completed message persisted as it ends; runs recorded with outcome,
usage and cost; budgets; compaction; crash recovery at start-up; stop.

Must not: see platform payloads (adapters build `Incoming`), or write SQL (the store does).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypeAlias

from bots import compaction
from bots.errors import describe_model_error, new_reference, unexpected_failure_text
from bots.incoming import Attachment, Incoming
from bots.prompt import attributed_text, summary_text, system_prompt, user_header
from bots.settings import Settings
from bots.surface import Notice, RunFinished, RunStarted, Surface, SurfaceEvent, SurfaceFactory
from core.events import AgentEnd, MessageEnd
from core.history import interrupted_result, unanswered_tool_calls
from core.loop import AgentContext, LoopConfig, RunControl, run_agent
from core.messages import (
    AssistantMessage,
    Author,
    Image,
    Message,
    Text,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.models.base import Model
from core.tools import AnyTool
from storage.base import (
    Conversation,
    ConversationStore,
    LoadedConversation,
    RunOutcome,
    RunRecord,
)

log = logging.getLogger(__name__)

SubmitResult: TypeAlias = Literal["started", "steered", "duplicate", "refused"]

INTERRUPTED_NOTICE = (
    "My previous answer here was interrupted because Teammate restarted. "
    "Ask again if you still need it."
)
DELIVERY_MEMORY_S = 7 * 24 * 3600
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024


@dataclass(slots=True)
class _Active:
    """A conversation with a run in progress (or about to start)."""

    conversation: Conversation
    author: Author
    surface: Surface
    control: RunControl = field(default_factory=RunControl)
    # Messages committed while the run was still loading history; steered in once it knows
    # where the loaded history ends (so no message is delivered twice or lost).
    early: list[tuple[int, Message]] = field(default_factory=list)
    loaded_seq: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    run_id: int | None = None  # the run being recorded, once started


class ConversationRunner:
    """Runs conversations. Create one per process; `await recover()` once at start-up."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        settings: Settings,
        model_factory: Callable[[str], Model],
        toolset_factory: Callable[[str], Sequence[AnyTool]],
        platform_rules: str,
        surfaces: SurfaceFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self._model_factory = model_factory
        self._toolset_factory = toolset_factory
        self._platform_rules = platform_rules
        self._surfaces = surfaces
        self._clock = clock
        self._models: dict[str, Model] = {}
        self._active: dict[str, _Active] = {}
        self._workspaces: dict[str, Path] = {}

    # -- the public face -------------------------------------------------------------------

    async def submit(self, incoming: Incoming, surface: Surface) -> SubmitResult:
        """Accept a message: stored at once; answered by a new run, or steered into the
        conversation's running one. A repeated delivery is dropped; a person or channel not on
        the allow-lists is told so and nothing is stored."""
        if not await self.store.claim_delivery(incoming.delivery_id):
            log.info("duplicate delivery %s dropped", incoming.delivery_id)
            return "duplicate"
        refusal = self._access_refusal(incoming)
        if refusal is not None:
            log.info("refused %s in %s: %s", incoming.author.id, incoming.channel_key, refusal)
            await self._emit(surface, Notice(refusal, "warning"))
            await self._close_surface(surface)
            return "refused"
        conversation = await self.store.get_or_create_conversation(
            incoming.conversation_key, channel_key=incoming.channel_key, title=incoming.title
        )
        if incoming.backfill and await self.store.message_count(conversation.id) == 0:
            await self.store.append_message(conversation.id, self._backfill_message(incoming))
        message = await self._user_message(incoming)
        stored = await self.store.append_message(conversation.id, message)

        active = self._active.get(incoming.conversation_key)
        if active is not None:
            if active.loaded_seq is None:
                active.early.append((stored.seq, message))
            elif stored.seq > active.loaded_seq:
                active.control.steer(message)
            return "steered"
        active = _Active(conversation=conversation, author=incoming.author, surface=surface)
        self._active[incoming.conversation_key] = active
        active.task = asyncio.create_task(
            self._drive(active), name=f"conversation:{incoming.conversation_key}"
        )
        return "started"

    def is_running(self, conversation_key: str) -> bool:
        return conversation_key in self._active

    def stop(self, conversation_key: str, by: Author | None = None) -> bool:
        """Cancel the conversation's run. True if there was one."""
        active = self._active.get(conversation_key)
        if active is None:
            return False
        who = f" by {by.name}" if by else ""
        active.control.cancel(f"Stopped{who}.")
        return True

    async def wait(self, conversation_key: str) -> None:
        """Return once the conversation has no run in progress."""
        active = self._active.get(conversation_key)
        if active is not None:
            await active.done.wait()

    async def wait_all(self) -> None:
        while self._active:
            await next(iter(self._active.values())).done.wait()

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop every run and wait (bounded) for them to record their outcome."""
        for active in list(self._active.values()):
            active.control.cancel("Teammate is shutting down.")
        tasks = [a.task for a in self._active.values() if a.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

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
        """Close runs a crash interrupted: make their history replayable for good and tell
        their conversations. Returns the runs recovered."""
        recovered: list[RunRecord] = []
        # Platforms retry a delivery for minutes, not days; a week of ids is plenty.
        await self.store.prune_deliveries(DELIVERY_MEMORY_S)
        for run in await self.store.running_runs():
            if run.conversation_key in self._active or _owner_alive(run.owner):
                continue  # still running here, or in another live process on this database
            loaded = await self.store.load(run.conversation_id)
            messages = [stored.message for stored in loaded.messages]
            for call_id, name in unanswered_tool_calls(messages):
                await self.store.append_message(
                    run.conversation_id, interrupted_result(call_id, name), run_id=run.id
                )
            record = await self.store.finish_run(
                run.id, "interrupted", error="interrupted by a restart"
            )
            recovered.append(record)
            surface = (
                self._surfaces.for_ref(run.conversation_key, run.surface_ref)
                if self._surfaces
                else None
            )
            if surface is not None:
                await self._emit(surface, Notice(INTERRUPTED_NOTICE, "warning"))
                await self._close_surface(surface)
            log.warning("run %s in %s was interrupted; repaired", run.id, run.conversation_key)
        return recovered

    # -- one conversation ------------------------------------------------------------------

    async def _drive(self, active: _Active) -> None:
        key = active.conversation.key
        try:
            while True:
                outcome = await self._guarded_run(active)
                leftover = active.control.take_pending()
                if outcome == "aborted" and leftover:
                    await self._emit(active.surface, Notice(_unanswered(len(leftover))))
                if outcome == "aborted" or not (leftover or active.early):
                    break
                # Messages that came too late for that run: answer them in a new one.
                active.control = RunControl()
                active.loaded_seq = None
                authors = [m.author for m in leftover if isinstance(m, UserMessage) and m.author]
                if authors:
                    active.author = authors[-1]
        finally:
            await self._close_surface(active.surface)
            del self._active[key]
            active.done.set()

    async def _guarded_run(self, active: _Active) -> RunOutcome:
        active.run_id = None
        try:
            return await self._run(active)
        except Exception:
            reference = new_reference()
            log.exception("run in %s failed (reference %s)", active.conversation.key, reference)
            usage = Usage()
            if active.run_id is not None:
                try:
                    record = await self.store.finish_run(
                        active.run_id, "error", error=f"unexpected failure {reference}"
                    )
                    usage = record.usage
                except Exception:
                    log.exception("could not record the failed run %s", active.run_id)
            finished = RunFinished(
                conversation_key=active.conversation.key,
                run_id=active.run_id or 0,
                outcome="error",
                usage=usage,
                final_text="",
                error_text=unexpected_failure_text(reference),
                reference=reference,
            )
            await self._emit(active.surface, finished)
            return "error"

    async def _run(self, active: _Active) -> RunOutcome:
        conversation = active.conversation
        surface = active.surface
        refusal = await self._budget_refusal(conversation, active.author)
        model = self._model(conversation.channel_key)
        run = await self.store.start_run(
            conversation.id,
            user_id=active.author.id,
            channel_key=conversation.channel_key,
            model=model.info.id,
            surface_ref=surface.ref,
            owner=_OWNER,
        )
        active.run_id = run.id
        await self._emit(surface, RunStarted(conversation.key, run.id, active.author))
        if refusal is not None:
            active.loaded_seq = (await self.store.load(conversation.id)).last_seq
            active.early.clear()
            record = await self.store.finish_run(run.id, "error", error=refusal)
            await self._emit(surface, self._finished(record, "", refusal))
            return "error"

        loaded = await self.store.load(conversation.id)
        self._mark_loaded(active, loaded.last_seq)
        tools = list(self._toolset_factory(conversation.channel_key))
        prompt = self._system_prompt(conversation.channel_key, tools)
        loaded = await self._compact_if_needed(conversation, loaded, model, surface, force=False)
        workspace = self._workspace(conversation.channel_key)
        config = LoopConfig(
            max_turns=self.settings.max_turns,
            max_tokens=self.settings.max_output_tokens,
            workspace=workspace,
            caller=active.author,
            conversation_key=conversation.key,
        )

        overflow_retried = False
        while True:
            context = AgentContext(prompt, self._context_messages(loaded), tools)
            end = await self._stream_run(context, model, active, run.id, config)
            last = _last_assistant(end.messages)
            overflowed = (
                end.reason == "error" and last is not None and last.error_kind == "context_overflow"
            )
            if not overflowed or overflow_retried:
                break
            overflow_retried = True
            await self._emit(surface, Notice("This conversation got long; summarising it.", "info"))
            loaded = await self.store.load(conversation.id)
            loaded = await self._compact_if_needed(conversation, loaded, model, surface, force=True)

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
        record = await self.store.finish_run(run.id, outcome, error=end.error_message)
        final_text = last.text() if last is not None else ""
        await self._emit(surface, self._finished(record, final_text, error_text))
        return outcome

    async def _stream_run(
        self,
        context: AgentContext,
        model: Model,
        active: _Active,
        run_id: int,
        config: LoopConfig,
    ) -> AgentEnd:
        conversation_id = active.conversation.id
        end: AgentEnd | None = None
        async for event in run_agent(context, model, control=active.control, config=config):
            if isinstance(event, MessageEnd) and isinstance(
                event.message, AssistantMessage | ToolResultMessage
            ):
                # User messages (steering) were committed when they arrived.
                await self.store.append_message(conversation_id, event.message, run_id=run_id)
                if isinstance(event.message, AssistantMessage) and event.message.usage.total_tokens:
                    await self.store.record_usage(run_id, event.message.usage, model=model.info.id)
            elif isinstance(event, AgentEnd):
                end = event
            await self._emit(active.surface, event)
        assert end is not None  # run_agent always ends with AgentEnd
        return end

    def _mark_loaded(self, active: _Active, last_seq: int) -> None:
        active.loaded_seq = last_seq
        for seq, message in active.early:
            if seq > last_seq:
                active.control.steer(message)
        active.early.clear()

    # -- compaction ------------------------------------------------------------------------

    def _context_messages(self, loaded: LoadedConversation) -> list[Message]:
        messages: list[Message] = []
        if loaded.compaction is not None and loaded.compaction.summary:
            messages.append(UserMessage(content=summary_text(loaded.compaction.summary)))
        messages.extend(stored.message for stored in loaded.messages)
        return messages

    async def _compact_if_needed(
        self,
        conversation: Conversation,
        loaded: LoadedConversation,
        model: Model,
        surface: Surface,
        *,
        force: bool,
    ) -> LoadedConversation:
        settings = self.settings.compaction
        tokens = compaction.context_tokens(self._context_messages(loaded))
        window = model.info.context_window
        if not force and not compaction.needs_compaction(tokens, window, settings.reserve_tokens):
            return loaded
        keep = settings.keep_recent_tokens if not force else settings.keep_recent_tokens // 2
        cut = compaction.find_cut(loaded.messages, keep)
        if cut is None:
            return loaded
        previous = loaded.compaction.summary if loaded.compaction else None
        try:
            summary = await compaction.summarize(
                model, previous, [stored.message for stored in cut.older]
            )
        except compaction.CompactionFailed as failed:
            log.warning("compaction of %s failed: %s", conversation.key, failed)
            return loaded
        up_to = cut.older[-1].seq
        stored = await self.store.add_compaction(
            conversation.id,
            summary,
            up_to,
            {"tokens_before": tokens, "messages_summarised": len(cut.older)},
        )
        log.info("compacted %s up to seq %s (%s tokens)", conversation.key, up_to, tokens)
        return LoadedConversation(conversation=conversation, compaction=stored, messages=cut.recent)

    # -- access and budgets ----------------------------------------------------------------

    def _access_refusal(self, incoming: Incoming) -> str | None:
        """Why this person or channel may not use Teammate (allow-lists), or None."""
        users = self.settings.allowed_users
        if users and incoming.author.id not in users:
            return "Sorry, I'm not enabled for you. Ask an admin to add you to `allowed_users`."
        channels = self.settings.allowed_channels
        platform = incoming.channel_key.split(":", 1)[0]
        if channels and incoming.channel_key not in channels and platform not in channels:
            return "Sorry, I'm not enabled in this channel (see `allowed_channels`)."
        return None

    async def _budget_refusal(self, conversation: Conversation, author: Author) -> str | None:
        budgets = self.settings.budgets
        day_start = _utc_day_start(self._clock())
        checks: list[tuple[float, str, str, Usage]] = []
        if budgets.conversation_usd_per_day is not None:
            spent = await self.store.usage_since(day_start, conversation_id=conversation.id)
            checks.append(
                (budgets.conversation_usd_per_day, "this conversation", "conversation", spent)
            )
        if budgets.channel_usd_per_day is not None:
            spent = await self.store.usage_since(day_start, channel_key=conversation.channel_key)
            checks.append((budgets.channel_usd_per_day, "this channel", "channel", spent))
        if budgets.user_usd_per_day is not None:
            spent = await self.store.usage_since(day_start, user_id=author.id)
            checks.append((budgets.user_usd_per_day, f"{author.name}", "user", spent))
        for limit, who, name, spent in checks:
            if spent.cost >= limit:
                return (
                    f"Daily budget reached: {who} has used ${spent.cost:.2f} of "
                    f"${limit:.2f} today (limit `budgets.{name}_usd_per_day`). "
                    "It resets at midnight UTC."
                )
        return None

    # -- building blocks -------------------------------------------------------------------

    def _model(self, channel_key: str) -> Model:
        model_id = self.settings.model_for(channel_key)
        model = self._models.get(model_id)
        if model is None:
            model = self._model_factory(model_id)
            self._models[model_id] = model
        return model

    def _system_prompt(self, channel_key: str, tools: Sequence[AnyTool]) -> str:
        return system_prompt(
            platform_rules=self._platform_rules,
            channel_prompt=self.settings.channel(channel_key).system_prompt,
            global_prompt=self.settings.system_prompt,
            tools=tools,
        )

    def _workspace(self, channel_key: str) -> Path:
        path = self._workspaces.get(channel_key)
        if path is None:  # made once per channel, not on every run (a syscall on the loop)
            path = self.settings.workspaces_dir / workspace_name(channel_key)
            path.mkdir(parents=True, exist_ok=True)
            self._workspaces[channel_key] = path
        return path

    async def _user_message(self, incoming: Incoming) -> UserMessage:
        text = attributed_text(incoming.author, incoming.timestamp, incoming.text)
        images: list[Image] = []
        for attachment in incoming.attachments:
            if (
                attachment.mime_type in IMAGE_TYPES
                and len(attachment.data) <= MAX_INLINE_IMAGE_BYTES
            ):
                images.append(
                    Image(
                        data=base64.b64encode(attachment.data).decode(),
                        mime_type=attachment.mime_type,
                    )
                )
            else:
                saved = await asyncio.to_thread(self._save_attachment, incoming, attachment)
                text += f"\n(attached file {attachment.name!r}, saved in the workspace as {saved})"
        content: str | list[Text | Image] = [Text(text=text), *images] if images else text
        return UserMessage(
            content=content,
            author=incoming.author,
            timestamp=incoming.timestamp,
            platform_message_id=incoming.platform_message_id,
        )

    def _save_attachment(self, incoming: Incoming, attachment: Attachment) -> str:
        folder = self._workspace(incoming.channel_key) / "attachments"
        folder.mkdir(exist_ok=True)
        name = _safe_file_name(attachment.name)
        target = folder / name
        counter = 1
        while target.exists():
            target = folder / f"{Path(name).stem}-{counter}{Path(name).suffix}"
            counter += 1
        target.write_bytes(attachment.data)
        return f"attachments/{target.name}"

    def _backfill_message(self, incoming: Incoming) -> UserMessage:
        lines = ["Earlier messages in this thread, before you were mentioned:"]
        for earlier in incoming.backfill:
            author = earlier.author
            if earlier.from_assistant:
                author = Author(id=author.id, name="you (Teammate)")
            lines.append(f"{user_header(author, earlier.timestamp)}\n{earlier.text}")
        return UserMessage(content="\n\n".join(lines), timestamp=incoming.backfill[0].timestamp)

    def _finished(self, record: RunRecord, final_text: str, error_text: str | None) -> RunFinished:
        return RunFinished(
            conversation_key=record.conversation_key,
            run_id=record.id,
            outcome=record.outcome,
            usage=record.usage,
            final_text=final_text,
            error_text=error_text,
        )

    async def _emit(self, surface: Surface, event: SurfaceEvent) -> None:
        try:
            await surface.emit(event)
        except Exception:
            log.exception("surface failed to show %s", event.type)

    async def _close_surface(self, surface: Surface) -> None:
        try:
            await surface.close()
        except Exception:
            log.exception("surface failed to close")


def _unanswered(count: int) -> str:
    messages = "message" if count == 1 else f"{count} messages"
    return (
        f"I stopped, so I haven't answered the {messages} sent meanwhile. They are part of "
        "the conversation: send another message and I'll take them into account."
    )


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


# Which process runs a run, so that recovery at start-up leaves alone the runs of another
# live process sharing the database (a terminal beside a bot).
_OWNER = {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}


def _owner_alive(owner: dict[str, object]) -> bool:
    if not owner or owner == _OWNER:
        return False  # unknown, or this very process (whose live runs are in _active)
    if owner.get("host") != _OWNER["host"]:
        return True  # another machine's run: not ours to judge
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, under another user
    start = owner.get("start")
    return start is None or _process_start(pid) == start  # a reused pid is another process


def _last_assistant(messages: list[Message]) -> AssistantMessage | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message
    return None


def _utc_day_start(now: float) -> float:
    day = datetime.fromtimestamp(now, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def workspace_name(channel_key: str) -> str:
    """A directory name for a channel: readable, safe, and unique per key."""
    readable = _UNSAFE.sub("_", channel_key).strip("._")[:60] or "channel"
    digest = hashlib.sha256(channel_key.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


def _safe_file_name(name: str) -> str:
    base = Path(name).name
    cleaned = _UNSAFE.sub("_", base).strip("._")[:100]
    return cleaned or "file"
