"""What a Discord surface writes besides the answer (part of `bots.platforms.discord.surface`).

Owns: the tool call's embed (grey while it runs; green or red with its duration, arguments
and output cut short when it ends, output too long for an embed attached as a file), the
lines for a notice, the head's one-line summary at the end (an `/ask`'s head in the channel:
where the answer is), the error line and a file too large to attach. Marks and words for how a
run ended are the shared ones (`bots.surface.base`), so an answer ends the same way on every
platform. Pure: no IO.
"""

from __future__ import annotations

import io
import json
from typing import Any

import discord

from bots.platforms.discord.surface_parts import MESSAGE_LIMIT
from bots.surface.base import NOTICE_MARK, OUTCOME_MARK, OUTCOME_WORD
from bots.surface.contract import FileOut, Notice, RunFinished
from core.events import ToolExecutionEnd, ToolExecutionStart

MAX_UPLOAD_BYTES = 8 * 1024 * 1024  # under Discord's default 10 MiB per upload
EMBED_OUTPUT_CHARS = 900  # tool output shown in the embed; more goes to a file
EMBED_ARGS_CHARS = 300
EMBED_TITLE_CHARS = 240
ERROR_CHARS = 400
GREEN = 0x2D9D78
RED = 0xD9534F
GREY = 0x99AAB5


def tool_started_embed(event: ToolExecutionStart) -> discord.Embed:
    return discord.Embed(
        title=cut(f"⚙️ {event.label or event.tool_name}", EMBED_TITLE_CHARS), colour=GREY
    )


def tool_ended_embed(
    event: ToolExecutionEnd, started: ToolExecutionStart | None
) -> tuple[discord.Embed, list[discord.File]]:
    """The call's embed at its end, and its whole output as a file when the embed cuts it."""
    label = event.tool_name
    arguments: dict[str, Any] = {}
    if started is not None:
        label = started.label or event.tool_name
        arguments = started.arguments
    output = event.result.text()
    mark = "❌" if event.is_error else "✅"
    embed = discord.Embed(
        title=cut(f"{mark} {label}", EMBED_TITLE_CHARS),
        colour=RED if event.is_error else GREEN,
    )
    if output.strip():
        embed.description = _code(cut(output, EMBED_OUTPUT_CHARS))
    if arguments:
        embed.add_field(name="arguments", value=_code(cut(_json(arguments), EMBED_ARGS_CHARS)))
    embed.set_footer(text=f"{event.tool_name} · {event.duration_s:.1f}s")
    files: list[discord.File] = []
    if len(output) > EMBED_OUTPUT_CHARS:
        data = output.encode()[:MAX_UPLOAD_BYTES]
        files.append(discord.File(io.BytesIO(data), filename=f"{event.tool_name}-output.txt"))
    return embed, files


def notice_line(event: Notice) -> str:
    return cut(f"{NOTICE_MARK[event.level]} {event.text}", MESSAGE_LIMIT)


def too_large_line(event: FileOut) -> str:
    size_mb = len(event.data) / 1_048_576
    return cut(
        f"📎 `{event.name}` is too large to attach here ({size_mb:.1f} MB); "
        f"it is in the channel's workspace at `{event.path}`.",
        MESSAGE_LIMIT,
    )


def summary(event: RunFinished, tools: int) -> str:
    """What a head that showed only "working" says at the end."""
    used = f"used {tools} tool{'s' if tools != 1 else ''}" if tools else ""
    mark, word = OUTCOME_MARK[event.outcome], OUTCOME_WORD[event.outcome]
    if event.outcome == "done":
        return f"{mark} {used.capitalize()}" if used else f"{mark} {word}"
    return f"{mark} {word} · {used}" if used else f"{mark} {word}"


def pointer_line(event: RunFinished, tools: int, thread_id: int) -> str:
    """What an `/ask`'s head in the channel says at the end when the answer is in the thread
    started from it (a mention of the thread is a link to it)."""
    where = f"<#{thread_id}>"
    if event.outcome == "done":
        used = f" · used {tools} tool{'s' if tools != 1 else ''}" if tools else ""
        return f"{OUTCOME_MARK['done']} Answered in {where}{used}"
    return f"{summary(event, tools)} · in {where}"


def error_line(event: RunFinished) -> str:
    text = cut(" ".join((event.error_text or "").split()), ERROR_CHARS)
    if event.reference and event.reference not in text:
        text += f" (reference `{event.reference}`)"
    # Done, but with something to say (the turn cap): a note, as `outcome_line` has it.
    mark = NOTICE_MARK["info"] if event.outcome == "done" else OUTCOME_MARK[event.outcome]
    return f"{mark} {text}"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str) -> str:
    # A fence inside the output would end the block early: break it visibly.
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"


def _json(arguments: dict[str, Any]) -> str:
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except ValueError:
        return str(arguments)
