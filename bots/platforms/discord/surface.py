"""How a run looks on Discord (docs/architecture.md, "The contracts": Surface).

Owns: `DiscordSurfaces` (the factory that reports on an earlier run after a restart) and the
names the bot and tests use; `DiscordSurface`, its lifecycle a state machine (`Stage`, drawn in
its docstring), is in `surface_run`. Its parts: the messages it posts and edits
(`surface_posted`), an answer's text as messages (`surface_parts`), the tool embeds and one-line
texts (`surface_lines`), notices (`surface_notices`), what a restart finds of an earlier
process's answer (`surface_recovery`). A run shows as:
- a head message, posted at `run_started` ("Working…" with a Stop button whose persistent
  custom id carries the run), or the interaction's own response for `/ask`;
- the answer streamed into the head and the messages after it, edited at most about once a
  second (`bots.surface.throttle`), split at Discord's 2,000 characters on paragraph or code-fence
  boundaries with fences balanced (`bots.surface.markdown_split`); a reply that calls tools with no
  text (the 5.5 models) shows its thinking there instead, once it ends (`bots.surface.narration`);
- the long-answer rule (`surface_parts`): a stretch of answer shows as up to four such
  messages; a longer one as one message, the whole stretch attached to it as `answer.md`, what
  was streamed before folded into it: exactly one copy, and no note left promising the file;
- an `/ask`'s head is in the channel, the conversation in the thread started from it: the head
  shows the answer only when that is all of it (one message, no tool call). Once the answer goes
  on, the head's text moves to the thread ahead of it, and at the end the head says where the
  answer is (`✅ Answered in <#thread>`);
- one compact embed per tool call (label, green or red, duration, arguments and output cut
  short); output too long for an embed is attached as a file, which the client folds;
- at the end the Stop button goes, 👍/👎 buttons join the last message of the answer, and an
  error is one short line.
Nothing mentions anyone unless it is a note addressed to one person. A typing indicator runs
while the run works. Every send and edit with the bot token waits its turn in the channel's lane
of the bot's `ChannelPacer` (`bots.platforms.discord.pacing`: 5 per 5 s per channel, sends and
edits shared, which Discord's headers do not show).

Interaction tokens live 15 minutes: the head of an `/ask` is edited through the token only
while it is valid (`TOKEN_LIFE_S`, with a margin); after that, or when Discord refuses the
token, what the head would have shown is posted with the bot token instead, never lost.
Private notices go ephemeral through a live interaction, else are addressed to the person.

Recovery (docs/architecture.md, "Crash recovery"): the `ref` names the messages showing the
latest stretch of answer text (`parts`, at most `MAX_PARTS_PER_BLOCK`; a long answer's one
message), stored (`Checkpointed`) as each is posted, whether the long answer's file is attached
to its message, and the newest message posted when it was stored (`after`). A surface made from
a ref after a crash edits those parts in place (folding them into one message when the answer
turned out long), deletes any the answer no longer needs, and adopts a part or a long answer's
message posted in the instant before it could be stored, or an `/ask` head's text moved to the
thread then (one read of the bot's own messages after `after`): nothing is posted twice.
"""

from __future__ import annotations

from typing import Any

import discord

from bots.platforms.discord.pacing import ChannelPacer
from bots.platforms.discord.surface_lines import MAX_UPLOAD_BYTES
from bots.platforms.discord.surface_parts import (
    MAX_PARTS_PER_BLOCK,
    MESSAGE_LIMIT,
    OVERFLOW_FILE,
    WRITING_TEXT,
    attached_text,
)
from bots.platforms.discord.surface_recovery import Recovered, recovered_from_ref, ref_int
from bots.platforms.discord.surface_run import (
    EDIT_INTERVAL_S,
    PLATFORM,
    TOKEN_LIFE_S,
    WORKING_TEXT,
    DiscordSurface,
    Stage,
)
from bots.surface.contract import Surface

__all__ = [
    "EDIT_INTERVAL_S",
    "MAX_PARTS_PER_BLOCK",
    "MAX_UPLOAD_BYTES",
    "MESSAGE_LIMIT",
    "OVERFLOW_FILE",
    "PLATFORM",
    "TOKEN_LIFE_S",
    "WORKING_TEXT",
    "WRITING_TEXT",
    "DiscordSurface",
    "DiscordSurfaces",
    "Recovered",
    "Stage",
    "attached_text",
]


class DiscordSurfaces:
    """Surfaces for earlier Discord runs, from their stored `ref` (recovery after a restart).

    The runner is made before the bot that needs it, so the bot `attach`es itself; until then
    (and for refs of other platforms) there is no surface. Call the runner's `recover()` once
    the bot has logged in: a surface posts through the bot's connection."""

    def __init__(self, client: discord.Client | None = None) -> None:
        self._client = client
        self._pacer = ChannelPacer()

    def attach(self, client: discord.Client, pacer: ChannelPacer | None = None) -> None:
        """Surfaces post through `client`, sharing its `pacer` (the bot's, when it has one)."""
        self._client = client
        if pacer is not None:
            self._pacer = pacer

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        if ref.get("platform") != PLATFORM or self._client is None:
            return None
        channel_id = ref_int(ref.get("channel_id"))
        if channel_id is None:
            return None
        head_id = ref_int(ref.get("head_id"))
        head_channel_id = ref_int(ref.get("head_channel_id"))
        user = self._client.user
        return DiscordSurface(
            self._client.get_partial_messageable(channel_id),
            channel_id=channel_id,
            conversation_channel_id=conversation_key.rsplit(":", 1)[-1],
            head_id=head_id,
            head_channel=self._client.get_partial_messageable(head_channel_id)
            if head_channel_id is not None
            else None,
            recovered=recovered_from_ref(ref),
            own_id=user.id if user is not None else None,
            pacer=self._pacer,
        )
