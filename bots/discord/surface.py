"""How a run looks on Discord (docs/architecture.md, "The contracts": Surface).

Owns: `DiscordSurface` and `DiscordSurfaces` (the factory that reports on an earlier run after a
restart). A run shows as:
- a head message, posted at `run_started` ("Working…" with a Stop button whose persistent
  custom id carries the run), or the interaction's own response for `/ask`;
- the answer streamed into the head and the messages after it, edited at most about once a
  second (`bots.throttle`), split at Discord's 2,000 characters on paragraph or code-fence
  boundaries with fences balanced (`bots.markdown_split`); a reply that calls tools with no
  text (the 5.5 models) shows its thinking there instead, once it ends (`bots.narration`);
- one compact embed per tool call (label, green or red, duration, arguments and output cut
  short); output too long for an embed is attached as a file, which the client folds;
- at the end the Stop button goes, 👍/👎 buttons join the last message of the answer, and an
  error is one short line.
Nothing mentions anyone unless it is a note addressed to one person. A typing indicator runs
while the run works.

Interaction tokens live 15 minutes: the head of an `/ask` is edited through the token only
while it is valid (`TOKEN_LIFE_S`, with a margin); after that, or when Discord refuses the
token, what the head would have shown is posted with the bot token instead, never lost.
Private notices go ephemeral through a live interaction, else are addressed to the person.

Recovery (docs/architecture.md, "Crash recovery"): the `ref` names the messages showing the
latest stretch of answer text (`parts`, at most `MAX_PARTS_PER_BLOCK`), stored (`Checkpointed`)
as each is posted, whether its overflow file is attached, and the newest message posted when
it was stored (`after`). A surface made from a ref after a crash edits those parts in place,
deletes any the answer no longer needs, and adopts a part or file posted in the instant before
it could be stored (one read of the bot's own messages after `after`): nothing is posted twice.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import io
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, assert_never

import discord

from bots.discord.buttons import feedback_view, stop_view
from bots.markdown_split import split_markdown
from bots.narration import visible_text
from bots.runner import DELIVERED_TEXT, QUEUED_TEXT
from bots.surface import FileOut, Notice, RunFinished, RunStarted, Surface, SurfaceEvent
from bots.throttle import Throttle
from core.events import (
    AgentEnd,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from core.messages import AssistantMessage
from core.models.base import TextDelta

log = logging.getLogger(__name__)

PLATFORM = "discord"
MESSAGE_LIMIT = 2_000
EDIT_INTERVAL_S = 1.0
TOKEN_LIFE_S = 15 * 60 - 60  # an interaction token's 15 minutes, less a margin for the call
MAX_PARTS_PER_BLOCK = 10  # more than this is attached as a file instead of a wall of messages
EMBED_OUTPUT_CHARS = 900  # tool output shown in the embed; more goes to a file
EMBED_ARGS_CHARS = 300
EMBED_TITLE_CHARS = 240
MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # under Discord's default 10 MiB per upload
ERROR_CHARS = 400
LOOKUP_LIMIT = 50  # the bot's messages read after a crash to find an unrecorded part
WORKING_TEXT = "⏳ Working…"
OVERFLOW_FILE = "answer.md"
OVERFLOW_TEXT = f"*(The rest of this answer is attached as `{OVERFLOW_FILE}` when it is complete.)*"
GREEN = 0x2D9D78
RED = 0xD9534F
GREY = 0x99AAB5
_NOTICE_MARK = {"info": "ℹ️", "warning": "⚠️", "error": "❌"}
_INVALID_TOKEN_CODES = frozenset({50027, 10015})  # invalid webhook token, unknown webhook
_NO_MENTIONS = discord.AllowedMentions.none()
# A person's own message steered into a running answer is acknowledged with a reaction on it,
# not a line in the thread: 👀 when queued, ✅ once the answer takes it into account.
_REACTIONS = {QUEUED_TEXT: "👀", DELIVERED_TEXT: "✅"}


class Posted(abc.ABC):
    """A message this surface posted and may edit. `edit` returns False when it can no
    longer edit it (an interaction token that expired or was refused)."""

    def __init__(self, message_id: int, content: str = "") -> None:
        self.id = message_id
        self.content = content
        self.has_view = False

    @abc.abstractmethod
    async def edit(self, **fields: Any) -> bool: ...

    async def current_content(self) -> str | None:
        """What the message shows now, as Discord says (None: can't tell)."""
        return None

    async def delete(self) -> bool:
        """Remove it; False if it could not be."""
        return False


class _BotMessage(Posted):
    def __init__(self, message: discord.Message | discord.PartialMessage, content: str) -> None:
        super().__init__(message.id, content)
        self._message = message

    async def edit(self, **fields: Any) -> bool:
        try:
            await self._message.edit(**fields)
        except (discord.NotFound, discord.Forbidden):
            return False  # deleted, or not ours to edit: the caller shows it anew
        return True

    async def current_content(self) -> str | None:
        try:
            return (await self._message.fetch()).content
        except discord.HTTPException:
            return None

    async def delete(self) -> bool:
        try:
            await self._message.delete()
        except discord.NotFound:
            return True  # gone already
        except discord.HTTPException:
            log.warning("could not delete a stale part of an answer")
            return False
        return True


class _InteractionResponse(Posted):
    """The `/ask` interaction's original response, editable through its token while alive."""

    def __init__(
        self,
        interaction: discord.Interaction[Any],
        message_id: int,
        content: str,
        alive: Callable[[], bool],
    ) -> None:
        super().__init__(message_id, content)
        self._interaction = interaction
        self._alive = alive

    async def edit(self, **fields: Any) -> bool:
        if not self._alive():
            return False
        try:
            await self._interaction.edit_original_response(**fields)
        except discord.HTTPException as exc:
            if exc.status == 401 or exc.code in _INVALID_TOKEN_CODES:
                return False
            raise
        return True


@dataclass(slots=True, frozen=True)
class Recovered:
    """What an earlier process's `ref` says it showed (see the module's "Recovery")."""

    parts: tuple[int, ...] = ()  # the latest stretch of answer text, in order
    after: int | None = None  # the newest message it had posted when the ref was stored
    tools: int = 0  # tool calls it had shown (their embeds posted)
    head_text: bool = False  # the head shows answer text (not the "working" status)
    attached: bool = False  # the latest stretch's overflow file is posted


@dataclass(slots=True)
class _Block:
    """One stretch of answer text between tool calls, shown as one or more messages."""

    text: str = ""
    posted: list[Posted] = field(default_factory=list)
    overflow_attached: bool = False


class DiscordSurface:
    """Shows one run (or one steered message's notices) in a Discord channel, thread or DM.

    `channel` is where new messages go (the conversation's thread or DM). `head` is a message
    already shown for this run (the `/ask` response); `interaction` is the interaction that
    started it, for the head's token and ephemeral notices; `reply_to` is the person's message,
    which acknowledgements of a steered message react to. `recovered` is what an earlier
    process's ref says it showed (a restart's report), `own_id` the bot's user id (to find its
    own messages then). `clock` and `edit_interval_s` are for tests.
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
    ) -> None:
        self._channel = channel
        self._channel_id = channel_id
        self._conversation_channel_id = conversation_channel_id or str(channel_id)
        self._interaction = interaction
        self._reply_to = reply_to
        self._clock = clock
        self._token_deadline = clock() + token_life_s
        self._head: Posted | None = None
        # An /ask's head is in the channel, the conversation in the thread started from it.
        self._head_channel_id = _channel_id(head_channel) if head_channel is not None else None
        if head_id is not None:
            if interaction is not None:
                self._head = _InteractionResponse(interaction, head_id, "", self._token_alive)
            else:
                self._head = _BotMessage(_partial(head_channel or channel, head_id), "")
            # Shown before (a restart's report): its Stop button, if any, must go at the end.
            self._head.has_view = True
        self._first_head = self._head
        self._head_is_status = False  # the head shows WORKING_TEXT, set by this surface
        self._recovered = recovered
        self._own_id = own_id
        # The head shows the first block's first part.
        self._head_in_text = recovered is not None and recovered.head_text
        self._blocks: list[_Block] = []
        self._tools: dict[str, tuple[Posted, ToolExecutionStart]] = {}
        self._tool_count = recovered.tools if recovered is not None else 0
        self._tools_shown = self._tool_count  # embeds posted (what a restart can know of)
        self._last_sent: int | None = None  # the newest message this surface posted
        self._checkpoint: Callable[[], Awaitable[None]] | None = None
        self._run_id: int | None = None
        self._lock = asyncio.Lock()  # one writer at a time keeps messages in order
        self._throttle = Throttle(self._flush, edit_interval_s, clock=clock)
        self._typing: asyncio.Task[None] | None = None
        self._typing_stop = asyncio.Event()
        self._finished = False

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
        after = self._last_sent or recovered.after
        if after is not None and (self._head is None or after != self._head.id):
            ref["after"] = str(after)
        if self._tools_shown:
            ref["tools"] = self._tools_shown
        if self._head_in_text:
            ref["head_text"] = True
        return ref

    def set_checkpoint(self, checkpoint: Callable[[], Awaitable[None]]) -> None:
        self._checkpoint = checkpoint

    async def _store_ref(self) -> None:
        """Have the ref stored now: a crash after this finds the message just posted."""
        if self._checkpoint is not None:
            await self._checkpoint()

    async def emit(self, event: SurfaceEvent) -> None:
        match event:
            case RunStarted(run_id=run_id):
                self._run_id = run_id
                self._start_typing()
                await self._show_head()
            case MessageStart(message=AssistantMessage()):
                if not self._blocks or self._blocks[-1].text:
                    self._blocks.append(_Block())
            case MessageUpdate(delta=TextDelta(delta=text)):
                if text:
                    if not self._blocks:
                        self._blocks.append(_Block())
                    self._blocks[-1].text += text
                    self._throttle.request()
            case MessageEnd(message=AssistantMessage() as message):
                # The whole reply: deltas a slow surface's feed dropped (bounded) are in it;
                # a reply calling tools with no text narrates with its thinking.
                text = visible_text(message)
                if text and self._blocks:
                    self._blocks[-1].text = text
                self._throttle.request()
            case ToolExecutionStart():
                await self._throttle.drain()  # the text before the call shows above it
                await self._tool_started(event)
            case ToolExecutionEnd():
                await self._tool_ended(event)
            case Notice():
                await self._notice(event)
            case FileOut():
                await self._file(event)
            case RunFinished():
                await self._finish(event)
            case (
                AgentStart()
                | TurnStart()
                | MessageStart()
                | MessageUpdate()
                | MessageEnd()
                | ToolExecutionUpdate()
                | TurnEnd()
                | AgentEnd()
            ):
                pass
            case _:
                assert_never(event)

    async def close(self) -> None:
        await self._throttle.close()
        await self._stop_typing()

    # -- the head ----------------------------------------------------------------------------

    def _token_alive(self) -> bool:
        return self._clock() < self._token_deadline

    def _stop_button(self) -> discord.ui.View | None:
        if self._run_id is None:
            return None
        return stop_view(self._run_id, self._conversation_channel_id)

    async def _show_head(self) -> None:
        async with self._lock:
            view = self._stop_button()
            head = self._head
            shown = head is not None and (
                view is None or await head.edit(content=WORKING_TEXT, view=view)
            )
            if head is None or not shown:
                head = await self._send(WORKING_TEXT, view=view)
            head.content = WORKING_TEXT
            head.has_view = view is not None
            self._head = head
            self._head_is_status = True

    # -- text --------------------------------------------------------------------------------

    async def _flush(self) -> None:
        """Render every block's current text (called by the throttle, at most ~1/s)."""
        async with self._lock:
            for block in self._blocks:
                await self._render_block(block)

    async def _render_block(self, block: _Block) -> None:
        parts, _ = _parts(block.text)
        for index, part in enumerate(parts):
            if index < len(block.posted):
                posted = block.posted[index]
                if posted.content != part:
                    await self._edit_or_repost(block, index, content=part)
                continue
            if not block.posted and self._may_use_head():
                assert self._head is not None
                self._head_in_text = True
                block.posted.append(self._head)
                await self._edit_or_repost(block, 0, content=part)
                continue
            block.posted.append(await self._send(part))
            await self._store_ref()
        # Fewer parts than shown (an answer recovered after a crash, fences rebalanced): a
        # stale part must not keep showing old text. The first one is never stale.
        while len(block.posted) > max(len(parts), 1):
            stale = block.posted.pop()
            if stale is self._head or not await stale.delete():
                block.posted.append(stale)
                break
            await self._store_ref()

    def _may_use_head(self) -> bool:
        """The first text of a run goes into the head, unless tools came first."""
        return (
            self._head is not None
            and not self._head_in_text
            and self._tool_count == 0
            and not any(b.posted for b in self._blocks)
        )

    async def _edit_or_repost(self, block: _Block, index: int, **fields: Any) -> None:
        posted = block.posted[index]
        if await posted.edit(allowed_mentions=_NO_MENTIONS, **fields):
            posted.content = fields.get("content", posted.content)
            return
        # The interaction token is gone: show it anew with the bot token, and keep going there.
        replacement = await self._send(
            fields.get("content", posted.content), view=self._stop_button()
        )
        replacement.has_view = self._run_id is not None and not self._finished
        block.posted[index] = replacement
        if posted is self._head:
            self._head = replacement
        await self._store_ref()

    # -- tools -------------------------------------------------------------------------------

    async def _tool_started(self, event: ToolExecutionStart) -> None:
        self._tool_count += 1
        embed = discord.Embed(
            title=_cut(f"⚙️ {event.label or event.tool_name}", EMBED_TITLE_CHARS), colour=GREY
        )
        async with self._lock:
            # Text after the call goes below it, in a block of its own: the ref names that
            # block's (no) parts before the call shows, so a crash now never has the answer
            # after the call recovered into the text before it.
            self._blocks.append(_Block())
            await self._store_ref()
            posted = await self._send("", embed=embed)
            self._tools_shown += 1
        self._tools[event.tool_call_id] = (posted, event)

    async def _tool_ended(self, event: ToolExecutionEnd) -> None:
        started = self._tools.pop(event.tool_call_id, None)
        label = event.tool_name
        arguments: dict[str, Any] = {}
        if started is not None:
            label = started[1].label or event.tool_name
            arguments = started[1].arguments
        output = event.result.text()
        mark = "❌" if event.is_error else "✅"
        embed = discord.Embed(
            title=_cut(f"{mark} {label}", EMBED_TITLE_CHARS),
            colour=RED if event.is_error else GREEN,
        )
        if output.strip():
            embed.description = _code(_cut(output, EMBED_OUTPUT_CHARS))
        if arguments:
            embed.add_field(name="arguments", value=_code(_cut(_json(arguments), EMBED_ARGS_CHARS)))
        embed.set_footer(text=f"{event.tool_name} · {event.duration_s:.1f}s")
        files: list[discord.File] = []
        if len(output) > EMBED_OUTPUT_CHARS:
            data = output.encode()[:MAX_UPLOAD_BYTES]
            files.append(discord.File(io.BytesIO(data), filename=f"{event.tool_name}-output.txt"))
        async with self._lock:
            if started is None:
                await self._send("", embed=embed, files=files)
                return
            posted = started[0]
            fields: dict[str, Any] = {"embed": embed}
            if files:
                fields["attachments"] = files
            if not await posted.edit(**fields):
                await self._send("", embed=embed, files=files)

    # -- notices, files, the end -------------------------------------------------------------

    async def _notice(self, event: Notice) -> None:
        text = _cut(f"{_NOTICE_MARK[event.level]} {event.text}", MESSAGE_LIMIT)
        reaction = _REACTIONS.get(event.text)
        if reaction is not None and event.audience is not None and self._reply_to is not None:
            try:
                await self._reply_to.add_reaction(reaction)
                return
            except discord.HTTPException:
                log.info("could not react to a message; acknowledging in words")
        async with self._lock:
            if event.audience is None:
                await self._send(text)
                return
            if self._interaction is not None and self._token_alive():
                try:
                    await self._interaction.followup.send(
                        text, ephemeral=True, allowed_mentions=_NO_MENTIONS
                    )
                    return
                except discord.HTTPException as exc:
                    if exc.status != 401 and exc.code not in _INVALID_TOKEN_CODES:
                        raise
            user_id = event.audience.id
            if user_id.isdigit():
                mentions = discord.AllowedMentions(
                    everyone=False, roles=False, users=[discord.Object(id=int(user_id))]
                )
                await self._send(
                    _cut(f"<@{user_id}> {text}", MESSAGE_LIMIT), allowed_mentions=mentions
                )
            else:
                await self._send(text)

    async def _file(self, event: FileOut) -> None:
        async with self._lock:
            if len(event.data) > MAX_UPLOAD_BYTES:
                size_mb = len(event.data) / 1_048_576
                await self._send(
                    _cut(
                        f"📎 `{event.name}` is too large to attach here ({size_mb:.1f} MB); "
                        f"it is in the channel's workspace at `{event.path}`.",
                        MESSAGE_LIMIT,
                    )
                )
                return
            await self._send(
                "", files=[discord.File(io.BytesIO(event.data), filename=event.name[:200])]
            )

    async def _finish(self, event: RunFinished) -> None:
        self._run_id = event.run_id
        if event.final_text.strip() and not any(block.text.strip() for block in self._blocks):
            # Nothing was streamed (a report after a restart, a model that does not stream).
            block = _Block(text=event.final_text)
            if self._recovered is not None:
                async with self._lock:
                    await self._shown_before(block)
            self._blocks.append(block)
            self._throttle.request()
        await self._throttle.drain()
        self._finished = True
        await self._stop_typing()
        async with self._lock:
            await self._attach_overflow()
            last = self._last_text_message()
            head = self._head
            if head is not None and head.has_view and not self._head_is_status:
                # A head shown before a restart: if it still says "working", it is a status.
                self._head_is_status = await head.current_content() == WORKING_TEXT
            if head is not None and head is not last and (head.has_view or self._head_is_status):
                if self._head_is_status and not self._head_in_text:
                    # The head has no text of its own: it becomes a one-line summary.
                    summary = _summary(event, self._tool_count)
                    if not await head.edit(content=summary, view=None):
                        await self._send(summary)
                else:  # what it shows (after a restart: unknown to us) stays
                    await head.edit(view=None)
                head.has_view = False
            if last is not None:
                view = feedback_view(event.run_id) if event.outcome == "done" else None
                if view is not None or last.has_view:
                    if not await last.edit(view=view):
                        await self._send(last.content, view=view)
                    last.has_view = view is not None
            if event.error_text:
                await self._send(_error_line(event))

    async def _shown_before(self, block: _Block) -> None:
        """Find what an earlier process showed of `block` (a restart's report): the parts its
        ref names, then any of the bot's own messages after what the ref knew that reads like
        the next part, or is the overflow file (posted in the instant before it could be
        stored). They are edited in place, never posted again."""
        recovered = self._recovered or Recovered()
        head = self._head
        for part_id in recovered.parts[:MAX_PARTS_PER_BLOCK]:
            if head is not None and part_id == head.id:
                self._head_in_text = True
                block.posted.append(head)
            else:
                block.posted.append(_BotMessage(_partial(self._channel, part_id), ""))
        if not block.posted and self._may_use_head():
            assert head is not None
            self._head_in_text = True
            block.posted.append(head)
        block.overflow_attached = recovered.attached
        expected, overflows = _parts(block.text)
        missing = len(block.posted) < len(expected) or (overflows and not block.overflow_attached)
        known = [*recovered.parts, *([head.id] if head is not None else [])]
        anchor = max(recovered.after or 0, *known, 0)
        if not missing or not anchor or self._own_id is None:
            return
        for message in await self._own_messages_after(anchor):
            if message.embeds:
                continue
            if any(attached.filename == OVERFLOW_FILE for attached in message.attachments):
                block.overflow_attached = overflows
            elif (
                message.content
                and not message.attachments
                and len(block.posted) < len(expected)
                and _continues(message.content, expected[len(block.posted)])
            ):
                block.posted.append(_BotMessage(message, message.content))

    async def _own_messages_after(self, anchor: int) -> list[discord.Message]:
        """The bot's own messages after `anchor`, oldest first (one read, bounded)."""
        found: list[discord.Message] = []
        try:
            async for message in self._channel.history(
                limit=LOOKUP_LIMIT, after=discord.Object(id=anchor), oldest_first=True
            ):
                if message.id > anchor and message.author.id == self._own_id:
                    found.append(message)
        except discord.HTTPException:
            log.warning("could not read the channel to find an answer's parts; posting them")
        return sorted(found, key=lambda message: message.id)

    async def _attach_overflow(self) -> None:
        for block in self._blocks:
            _, overflows = _parts(block.text)
            if overflows and not block.overflow_attached:
                data = block.text.encode()[:MAX_UPLOAD_BYTES]
                file = discord.File(io.BytesIO(data), filename=OVERFLOW_FILE)
                await self._send("", files=[file])
                block.overflow_attached = True
                await self._store_ref()

    def _last_text_message(self) -> Posted | None:
        for block in reversed(self._blocks):
            if block.posted:
                return block.posted[-1]
        return None

    # -- sending -----------------------------------------------------------------------------

    async def _send(
        self,
        content: str,
        *,
        view: discord.ui.View | None = None,
        embed: discord.Embed | None = None,
        files: list[discord.File] | None = None,
        allowed_mentions: discord.AllowedMentions = _NO_MENTIONS,
    ) -> Posted:
        """Post with the bot token in the conversation's channel."""
        kwargs: dict[str, Any] = {"allowed_mentions": allowed_mentions}
        if content:
            kwargs["content"] = content
        if view is not None:
            kwargs["view"] = view
        if embed is not None:
            kwargs["embed"] = embed
        if files:
            kwargs["files"] = files
        message = await self._channel.send(**kwargs)
        self._last_sent = message.id
        posted = _BotMessage(message, content)
        posted.has_view = view is not None
        return posted

    # -- typing ------------------------------------------------------------------------------

    def _start_typing(self) -> None:
        if self._typing is None:
            self._typing = asyncio.create_task(self._type(), name="discord-typing")

    async def _type(self) -> None:
        try:
            async with self._channel.typing():
                await self._typing_stop.wait()
        except discord.HTTPException:
            log.info("the typing indicator failed; the answer is not affected")

    async def _stop_typing(self) -> None:
        self._typing_stop.set()
        if self._typing is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._typing


class DiscordSurfaces:
    """Surfaces for earlier Discord runs, from their stored `ref` (recovery after a restart).

    The runner is made before the bot that needs it, so the bot `attach`es itself; until then
    (and for refs of other platforms) there is no surface. Call the runner's `recover()` once
    the bot has logged in: a surface posts through the bot's connection."""

    def __init__(self, client: discord.Client | None = None) -> None:
        self._client = client

    def attach(self, client: discord.Client) -> None:
        self._client = client

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        if ref.get("platform") != PLATFORM or self._client is None:
            return None
        channel_id = _int(ref.get("channel_id"))
        if channel_id is None:
            return None
        head_id = _int(ref.get("head_id"))
        head_channel_id = _int(ref.get("head_channel_id"))
        raw_parts = ref.get("parts")
        parts = raw_parts[:MAX_PARTS_PER_BLOCK] if isinstance(raw_parts, list) else []
        tools = ref.get("tools")
        recovered = Recovered(
            parts=tuple(part for part in map(_int, parts) if part is not None),
            after=_int(ref.get("after")),
            tools=tools if isinstance(tools, int) and 0 <= tools <= 1_000_000 else 0,
            head_text=ref.get("head_text") is True,
            attached=ref.get("attached") is True,
        )
        user = self._client.user
        return DiscordSurface(
            self._client.get_partial_messageable(channel_id),
            channel_id=channel_id,
            conversation_channel_id=conversation_key.rsplit(":", 1)[-1],
            head_id=head_id,
            head_channel=self._client.get_partial_messageable(head_channel_id)
            if head_channel_id is not None
            else None,
            recovered=recovered,
            own_id=user.id if user is not None else None,
        )


def _parts(text: str) -> tuple[list[str], bool]:
    """The messages a stretch of answer text shows as, and whether it overflows: more than
    `MAX_PARTS_PER_BLOCK` parts show as the first ones and a note that the rest is attached.

    Called on every update of a stream, so only the text those parts can hold is split (a
    model's longest answer, split whole, holds the event loop for tens of milliseconds). Every
    part of a prefix's split but the last is the text's own (the split is greedy, front to
    back), so if a prefix of one part more than fits splits into more parts than are shown,
    those are the text's first parts; if it does not (blank lines dropped between parts), the
    text is split whole."""
    if not text.strip():
        return [], False
    prefix = text[: (MAX_PARTS_PER_BLOCK + 1) * MESSAGE_LIMIT]
    parts = split_markdown(prefix, MESSAGE_LIMIT)
    if len(parts) <= MAX_PARTS_PER_BLOCK and len(prefix) < len(text):
        parts = split_markdown(text, MESSAGE_LIMIT)
    if len(parts) > MAX_PARTS_PER_BLOCK:
        return [*parts[: MAX_PARTS_PER_BLOCK - 1], OVERFLOW_TEXT], True
    return parts, False


def _continues(shown: str, part: str) -> bool:
    """Could a message showing `shown` be an earlier state of `part` (the same place in a
    streamed answer: one is a prefix of the other, a fence closed at the end aside)?"""
    shown, part = _unfenced_end(shown), _unfenced_end(part)
    return bool(shown) and (part.startswith(shown) or shown.startswith(part))


def _unfenced_end(text: str) -> str:
    """`text` without trailing blanks and a closing fence line (added by a split)."""
    text = text.rstrip()
    head, _, last = text.rpartition("\n")
    if head and last.strip() and set(last.strip()) <= {"`", "~"}:
        return head.rstrip()
    return text


def _partial(channel: discord.abc.Messageable, message_id: int) -> discord.PartialMessage:
    get = getattr(channel, "get_partial_message", None)
    if get is None:
        raise TypeError("this channel cannot address a message by id")
    message: discord.PartialMessage = get(message_id)
    return message


def _channel_id(channel: discord.abc.Messageable) -> int | None:
    channel_id = getattr(channel, "id", None)
    return channel_id if isinstance(channel_id, int) else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 20 else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    # A fence inside the output would end the block early: break it visibly.
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"


def _json(arguments: dict[str, Any]) -> str:
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except ValueError:
        return str(arguments)


def _summary(event: RunFinished, tools: int) -> str:
    used = f"used {tools} tool{'s' if tools != 1 else ''}" if tools else ""
    if event.outcome == "done":
        return f"✅ {used.capitalize()}" if used else "✅ Done"
    head = {"aborted": "⏹️ Stopped", "interrupted": "⚠️ Interrupted"}.get(event.outcome, "❌ Failed")
    return f"{head} · {used}" if used else head


def _error_line(event: RunFinished) -> str:
    text = _cut(" ".join((event.error_text or "").split()), ERROR_CHARS)
    if event.reference and event.reference not in text:
        text += f" (reference `{event.reference}`)"
    mark = {"aborted": "⏹️", "interrupted": "⚠️"}.get(event.outcome, "❌")
    return f"{mark} {text}"
