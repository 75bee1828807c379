"""One run shown on Discord: `DiscordSurface` and its lifecycle, `Stage` (part of
`bots.platforms.discord.surface`, whose docstring says how a run looks and how a restart finds it).

Owns: the surface's state (its stage, the head, the answer's blocks, the tool embeds shown) and
its hooks for the surface events (`bots.surface.base`). What it posts and edits, the answer's
parts, the embeds and lines, notices and what a restart finds are in the `surface_*` modules
beside it.
"""

from __future__ import annotations

import asyncio
import enum
import io
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from bots.platforms.discord.buttons import feedback_view, stop_view
from bots.platforms.discord.pacing import ChannelPacer
from bots.platforms.discord.surface_approvals import ApprovalMessages
from bots.platforms.discord.surface_lines import (
    MAX_UPLOAD_BYTES,
    error_line,
    pointer_line,
    summary,
    too_large_line,
    tool_ended_embed,
    tool_started_embed,
)
from bots.platforms.discord.surface_notices import post_notice, reacted
from bots.platforms.discord.surface_parts import (
    OVERFLOW_FILE,
    Block,
    attached_text,
    split_parts,
)
from bots.platforms.discord.surface_posted import (
    NO_MENTIONS,
    BotMessage,
    InteractionResponse,
    Posted,
    Poster,
    Typing,
    channel_id_of,
    partial_message,
    show_with_file,
)
from bots.platforms.discord.surface_recovery import Recovered, adopt_shown_parts
from bots.surface.base import SurfaceBase
from bots.surface.contract import FileOut, Notice, RunFinished, RunStarted
from bots.surface.narration import visible_text
from bots.surface.throttle import Throttle
from core.events import ToolExecutionEnd, ToolExecutionStart
from core.messages import AssistantMessage

log = logging.getLogger(__name__)

PLATFORM = "discord"
EDIT_INTERVAL_S = 1.0
TOKEN_LIFE_S = 15 * 60 - 60  # an interaction token's 15 minutes, less a margin for the call
WORKING_TEXT = "⏳ Working…"


class Stage(enum.Enum):
    """Where a `DiscordSurface` is in showing its run (the diagram is in its docstring)."""

    NO_HEAD = "no head"  # nothing shown yet: a mention's answer, a steered message's notices
    HEAD_GIVEN = "head given"  # a head shown before this surface; what it says is unknown
    WORKING = "working"  # the head says WORKING_TEXT with Stop, or the answer's first part
    FINISHED = "finished"  # the last text is flushed: the end is shown, the Stop buttons go


# The transitions `DiscordSurface._enter` expects; any other is logged and made all the same.
_TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.NO_HEAD: frozenset({Stage.WORKING, Stage.FINISHED}),
    Stage.HEAD_GIVEN: frozenset({Stage.WORKING, Stage.FINISHED}),
    Stage.WORKING: frozenset({Stage.FINISHED}),
    Stage.FINISHED: frozenset(),
}


class DiscordSurface(ApprovalMessages, SurfaceBase):
    """Shows one run (or one steered message's notices) in a Discord channel, thread or DM.

    `channel` is where new messages go (the conversation's thread or DM). `head` is a message
    already shown for this run (the `/ask` response); `interaction` is the interaction that
    started it, for the head's token and ephemeral notices; `reply_to` is the person's message,
    which acknowledgements of a steered message react to. `recovered` is what an earlier
    process's ref says it showed (a restart's report), `own_id` the bot's user id (to find its
    own messages then). `clock` and `edit_interval_s` are for tests.

    Its lifecycle (`Stage`; `_enter` makes every transition):

        NO_HEAD ────── run_started: post the head, "Working…" + Stop ─────┐
                                                                          ▼
        HEAD_GIVEN ─── run_started: edit the head to "Working…" + Stop ─▶ WORKING
           (through the token while it lives, else post a new head)       │
                                                                          │ run_finished
        NO_HEAD, HEAD_GIVEN ── run_finished (a restart's report) ──▶ FINISHED ◀┘

    A head is given by an `/ask` (its deferred response) or by a restart's ref. In WORKING the
    head shows "Working…" until the answer's first part streams into it, unless a tool call
    came first: then the answer streams in messages after the tool embeds and the head stays a
    status. FINISHED is entered once the last text is flushed: a head that is only a status (or
    a given head that still says "Working…") becomes the one-line summary, any other loses its
    Stop, the last part of the answer gets 👍/👎 when it is done, and an error gets one line.
    Notices and files are shown in any stage.
    """

    def __init__(
        self,
        channel: discord.abc.Messageable,
        *,
        channel_id: int,
        conversation_channel_id: str | None = None,
        interaction: discord.Interaction[Any] | None = None,
        head_id: int | None = None,
        head_channel: discord.abc.Messageable | None = None,
        reply_to: discord.Message | None = None,
        recovered: Recovered | None = None,
        own_id: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        edit_interval_s: float = EDIT_INTERVAL_S,
        token_life_s: float = TOKEN_LIFE_S,
        pacer: ChannelPacer | None = None,
    ) -> None:
        self._channel = channel
        self._poster = Poster(channel, pacer)  # posts with the bot token, in the conversation
        self._channel_id = channel_id
        self._conversation_channel_id = conversation_channel_id or str(channel_id)
        self._interaction = interaction
        self._reply_to = reply_to
        self._clock = clock
        self._token_deadline = clock() + token_life_s
        self._stage = Stage.NO_HEAD
        self._head: Posted | None = None
        # An /ask's head is in the channel, the conversation in the thread started from it.
        self._head_channel_id = channel_id_of(head_channel) if head_channel is not None else None
        if head_id is not None:
            if interaction is not None:
                self._head = InteractionResponse(interaction, head_id, "", self._token_alive)
            else:
                self._head = BotMessage(
                    partial_message(head_channel or channel, head_id), "", self._poster.pacer
                )
            # Shown before (a restart's report): its Stop button, if any, must go at the end.
            self._head.has_view = True
            self._stage = Stage.HEAD_GIVEN
        self._first_head = self._head
        self._recovered = recovered
        self._own_id = own_id
        self._blocks: list[Block] = []
        self._tools: dict[str, tuple[Posted, ToolExecutionStart]] = {}
        self._tool_count = recovered.tools if recovered is not None else 0
        self._tools_shown = self._tool_count  # embeds posted (what a restart can know of)
        self._checkpoint: Callable[[], Awaitable[None]] | None = None
        self._run_id: int | None = None
        self._lock = asyncio.Lock()  # one writer at a time keeps messages in order
        self._throttle = Throttle(self._flush, edit_interval_s, clock=clock)
        self._typing = Typing(channel)

    def _enter(self, stage: Stage) -> None:
        """The one place the stage changes (the diagram in the class's docstring)."""
        if stage not in _TRANSITIONS[self._stage]:
            log.warning("a Discord surface went from %s to %s", self._stage.value, stage.value)
        self._stage = stage

    # -- the Surface contract ----------------------------------------------------------------

    @property
    def ref(self) -> dict[str, Any]:
        ref: dict[str, Any] = {"platform": PLATFORM, "channel_id": str(self._channel_id)}
        if self._head is not None:
            ref["head_id"] = str(self._head.id)
            if self._head_channel_id is not None and self._head is self._first_head:
                ref["head_channel_id"] = str(self._head_channel_id)
        recovered = self._recovered or Recovered()
        if self._blocks:
            parts = [posted.id for posted in self._blocks[-1].posted]
            attached = self._blocks[-1].overflow_attached
        else:  # a restart's report: what the earlier process showed, until it is redone
            parts, attached = list(recovered.parts), recovered.attached
        if parts:
            ref["parts"] = [str(part) for part in parts]
        if attached:
            ref["attached"] = True
        after = self._poster.last_sent or recovered.after
        if after is not None and (self._head is None or after != self._head.id):
            ref["after"] = str(after)
        if self._tools_shown:
            ref["tools"] = self._tools_shown
        if self._head_shows_answer():
            ref["head_text"] = True
        return ref

    def set_checkpoint(self, checkpoint: Callable[[], Awaitable[None]]) -> None:
        self._checkpoint = checkpoint

    async def _store_ref(self) -> None:
        """Have the ref stored now: a crash after this finds the message just posted."""
        if self._checkpoint is not None:
            await self._checkpoint()

    async def close(self) -> None:
        await self._throttle.close()
        await self._typing.stop()

    # -- the hooks (bots.surface.base) -------------------------------------------------------

    async def on_run_started(self, event: RunStarted) -> None:
        self._run_id = event.run_id
        self._typing.start()
        await self._show_head()

    async def on_reply_started(self, message: AssistantMessage) -> None:
        if not self._blocks or self._blocks[-1].text:
            self._blocks.append(Block())

    async def on_text(self, message: AssistantMessage, delta: str) -> None:
        if delta:
            if not self._blocks:
                self._blocks.append(Block())
            self._blocks[-1].text += delta
            self._throttle.request()

    async def on_reply_ended(self, message: AssistantMessage) -> None:
        # The whole reply: deltas a slow surface's feed dropped (bounded) are in it; a reply
        # calling tools with no text narrates with its thinking.
        text = visible_text(message)
        if text and self._blocks:
            self._blocks[-1].text = text
        self._throttle.request()

    async def on_tool_started(self, event: ToolExecutionStart) -> None:
        await self._throttle.drain()  # the text before the call shows above it
        self._tool_count += 1
        embed = tool_started_embed(event)
        async with self._lock:
            for block in self._blocks:  # the answer goes on in the thread: not in the channel
                await self._move_out_of_head(block)
            # Text after the call goes below it, in a block of its own: the ref names that
            # block's (no) parts before the call shows, so a crash now never has the answer
            # after the call recovered into the text before it.
            self._blocks.append(Block())
            await self._store_ref()
            posted = await self._poster.send("", embed=embed)
            self._tools_shown += 1
        self._tools[event.tool_call_id] = (posted, event)

    async def on_tool_ended(self, event: ToolExecutionEnd) -> None:
        started = self._tools.pop(event.tool_call_id, None)
        embed, files = tool_ended_embed(event, started[1] if started is not None else None)
        async with self._lock:
            if started is None:
                await self._poster.send("", embed=embed, files=files)
                return
            fields: dict[str, Any] = {"embed": embed}
            if files:
                fields["attachments"] = files
            if not await started[0].edit(**fields):
                await self._poster.send("", embed=embed, files=files)

    async def on_notice(self, event: Notice) -> None:
        if await reacted(event, self._reply_to):
            return
        async with self._lock:
            live = self._interaction if self._token_alive() else None
            await post_notice(event, self._poster, live)

    async def on_file(self, event: FileOut) -> None:
        async with self._lock:
            if len(event.data) > MAX_UPLOAD_BYTES:
                await self._poster.send(too_large_line(event))
                return
            await self._poster.send(
                "", files=[discord.File(io.BytesIO(event.data), filename=event.name[:200])]
            )

    async def on_run_finished(self, event: RunFinished) -> None:
        self._run_id = event.run_id
        if event.final_text.strip() and not any(block.text.strip() for block in self._blocks):
            # Nothing was streamed (a report after a restart, a model that does not stream).
            block = Block(text=event.final_text)
            if self._recovered is not None:
                async with self._lock:
                    await adopt_shown_parts(
                        block,
                        self._recovered,
                        channel=self._channel,
                        head=self._head,
                        head_free=self._may_use_head(),
                        head_elsewhere=self._head_elsewhere(),
                        own_id=self._own_id,
                        pacer=self._poster.pacer,
                    )
            self._blocks.append(block)
            self._throttle.request()
        await self._throttle.drain()
        was_working = self._stage is Stage.WORKING
        self._enter(Stage.FINISHED)
        await self._typing.stop()
        async with self._lock:
            await self._attach_overflow()
            await self._show_end(event, was_working)

    # -- the head ----------------------------------------------------------------------------

    def _token_alive(self) -> bool:
        return self._clock() < self._token_deadline

    def _stop_button(self) -> discord.ui.View | None:
        if self._run_id is None:
            return None
        return stop_view(self._run_id, self._conversation_channel_id)

    def _head_elsewhere(self) -> bool:
        """The head is an `/ask`'s response in the channel, the conversation in the thread
        started from it: the head shows the answer only while that is all of it."""
        return (
            self._head is not None
            and self._head is self._first_head
            and self._head_channel_id is not None
            and self._head_channel_id != self._channel_id
        )

    async def _move_out_of_head(self, block: Block) -> None:
        """The answer goes on past an `/ask`'s head in the channel (a second part, a long
        answer's file, a tool call): the head's text moves to the thread, ahead of what
        follows, and the head says "working" again (at the end: where the answer is)."""
        head = block.posted[0] if block.posted else None
        if head is None or head is not self._head or not self._head_elsewhere():
            return
        text = head.content
        if await head.edit(content=WORKING_TEXT, allowed_mentions=NO_MENTIONS):
            head.content = WORKING_TEXT
        block.posted[0] = await self._poster.send(text)
        await self._store_ref()

    def _head_shows_answer(self) -> bool:
        """The head shows the answer's first part (streamed into it, or as a restart's ref says
        an earlier process did), not the "working" status."""
        if self._recovered is not None and self._recovered.head_text:
            return True
        head = self._head
        return head is not None and any(
            posted is head for block in self._blocks for posted in block.posted
        )

    def _may_use_head(self) -> bool:
        """The first text of a run goes into the head, unless tools came first."""
        return (
            self._head is not None
            and not self._head_shows_answer()
            and self._tool_count == 0
            and not any(b.posted for b in self._blocks)
        )

    async def _show_head(self) -> None:
        async with self._lock:
            view = self._stop_button()
            head = self._head
            shown = head is not None and (
                view is None or await head.edit(content=WORKING_TEXT, view=view)
            )
            if head is None or not shown:
                head = await self._poster.send(WORKING_TEXT, view=view)
            head.content = WORKING_TEXT
            head.has_view = view is not None
            self._head = head
            self._enter(Stage.WORKING)

    async def _show_end(self, event: RunFinished, was_working: bool) -> None:
        """The head's and the last part's buttons at the end, the summary, the error line.
        `was_working`: this surface showed the head as working (it is a status line)."""
        last = self._last_text_message()
        head = self._head
        if head is not None and head is not last and self._head_elsewhere():
            # An /ask's head in the channel: it says where the answer is.
            line = pointer_line(event, self._tool_count, self._channel_id)
            if await head.edit(content=line, view=None, allowed_mentions=NO_MENTIONS):
                head.content = line
            else:
                await self._poster.send(line)
            head.has_view = False
            head = None  # done with
        head_is_status = was_working
        if head is not None and head.has_view and not was_working:
            # A head shown before a restart: if it still says "working", it is a status.
            head_is_status = await head.current_content() == WORKING_TEXT
        if head is not None and head is not last and (head.has_view or head_is_status):
            if head_is_status and not self._head_shows_answer():
                # The head has no text of its own: it becomes a one-line summary.
                line = summary(event, self._tool_count)
                if not await head.edit(content=line, view=None):
                    await self._poster.send(line)
            else:  # what it shows (after a restart: unknown to us) stays
                await head.edit(view=None)
            head.has_view = False
        if last is not None:
            view = feedback_view(event.run_id) if event.outcome == "done" else None
            if view is not None or last.has_view:
                if not await last.edit(view=view):
                    await self._poster.send(last.content, view=view)
                last.has_view = view is not None
        if event.error_text:
            await self._poster.send(error_line(event))

    # -- text --------------------------------------------------------------------------------

    async def _flush(self) -> None:
        """Render every block's current text (called by the throttle, at most ~1/s)."""
        async with self._lock:
            for block in self._blocks:
                await self._render_block(block)

    async def _render_block(self, block: Block) -> None:
        parts, overflows = split_parts(block.text)
        if overflows and block.overflow_attached:
            parts = [attached_text(block.text)]
        if len(parts) > 1 or overflows:
            await self._move_out_of_head(block)
        for index, part in enumerate(parts):
            if index < len(block.posted):
                posted = block.posted[index]
                if posted.content != part:
                    await self._edit_or_repost(block, index, content=part)
                continue
            # An /ask's head in the channel takes the answer only if it is all of it.
            whole = len(parts) == 1 and not overflows
            if not block.posted and self._may_use_head() and (whole or not self._head_elsewhere()):
                assert self._head is not None
                block.posted.append(self._head)
                await self._edit_or_repost(block, 0, content=part)
                continue
            block.posted.append(await self._poster.send(part))
            await self._store_ref()
        # Fewer parts than shown (an answer recovered after a crash, fences rebalanced): a
        # stale part must not keep showing old text. The first one is never stale.
        while len(block.posted) > max(len(parts), 1):
            stale = block.posted.pop()
            if stale is self._head or not await stale.delete():
                block.posted.append(stale)
                break
            await self._store_ref()

    async def _edit_or_repost(self, block: Block, index: int, **fields: Any) -> None:
        posted = block.posted[index]
        if await posted.edit(allowed_mentions=NO_MENTIONS, **fields):
            posted.content = fields.get("content", posted.content)
            return
        # The interaction token is gone: show it anew with the bot token, and keep going there.
        replacement = await self._poster.send(
            fields.get("content", posted.content), view=self._stop_button()
        )
        replacement.has_view = self._run_id is not None and self._stage is not Stage.FINISHED
        block.posted[index] = replacement
        if posted is self._head:
            self._head = replacement
        await self._store_ref()

    async def _attach_overflow(self) -> None:
        """A stretch too long for messages: its one message says so, the whole stretch
        attached to it (the "being written" note replaced: nothing is left promising it)."""
        for block in self._blocks:
            if block.overflow_attached or not split_parts(block.text)[1]:
                continue
            data = block.text.encode()[:MAX_UPLOAD_BYTES]
            first = block.posted[0] if block.posted else None
            shown = await show_with_file(
                first, self._poster, attached_text(block.text), OVERFLOW_FILE, data
            )
            block.posted[:1] = [shown]
            block.overflow_attached = True
            await self._store_ref()

    def _last_text_message(self) -> Posted | None:
        for block in reversed(self._blocks):
            if block.posted:
                return block.posted[-1]
        return None
