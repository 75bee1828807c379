"""Block Kit for Teammate's answers in Slack: pure functions from state to JSON.

Owns: the action ids and values of the Stop and feedback buttons (and parsing them back), the
in-progress message, the final answer's parts (standard Markdown in `markdown` blocks, split
with `bots.surface.markdown_split`), one legacy attachment per tool call, and the small context
lines (usage; how the run ended is `bots.surface.base.outcome_line`, re-exported here, so it reads
as on every platform). No IO; `bots.platforms.slack.surface` decides what to send when.

Slack's limits that shape this: a message's `text` truncates at
40,000 characters; `markdown` blocks hold about 12,000 characters per message in total; 50
blocks per message; a legacy attachment's `text` folds behind "Show more" past 700 characters
or 5 lines, which makes it the native collapsible for tool output; `context_actions` holds at
most 5 elements and wants a fresh `block_id` on every update.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from bots.surface.base import outcome_line as outcome_line  # the marks every platform shows
from bots.surface.markdown_split import split_markdown
from core.messages import Usage

STOP_ACTION_ID = "teammate_stop"
FEEDBACK_ACTION_ID = "teammate_feedback"
STOP_BLOCK_PREFIX = "teammate_stop"
FEEDBACK_BLOCK_PREFIX = "teammate_feedback"

MARKDOWN_LIMIT = 12_000  # characters of `markdown` blocks per message
TEXT_LIMIT = 40_000  # a message's `text`
MAX_TOOL_ATTACHMENTS = 20  # older calls fold into one summary line beyond this
ARGUMENTS_LIMIT = 1_000
OUTPUT_LIMIT = 2_000
TITLE_LIMIT = 150

GREEN = "#2eb886"
RED = "#e01e5a"
GREY = "#9e9ea6"

Vote = Literal["up", "down"]


# -- button values ---------------------------------------------------------------------------------


def stop_value(run_id: int) -> str:
    return str(run_id)


def parse_stop_value(value: object) -> int | None:
    """The run id a Stop button carries, or None for anything else."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def feedback_value(run_id: int, vote: Vote) -> str:
    return f"{vote}:{run_id}"


def parse_feedback_value(value: object) -> tuple[int, Vote] | None:
    """(run id, "up" | "down") from a feedback button's value, or None."""
    if not isinstance(value, str):
        return None
    vote, _, run = value.partition(":")
    run_id = parse_stop_value(run)
    if run_id is None:
        return None
    if vote == "up":
        return run_id, "up"
    if vote == "down":
        return run_id, "down"
    return None


# -- pieces ----------------------------------------------------------------------------------------


def markdown_block(text: str) -> dict[str, Any]:
    return {"type": "markdown", "text": text}


def context_block(text: str) -> dict[str, Any]:
    """A small grey line of plain text (escaped: nothing in it can mention or link)."""
    return context_mrkdwn(escape(text))


def context_mrkdwn(mrkdwn: str) -> dict[str, Any]:
    """A small grey line of mrkdwn the caller made safe (a mention it means to make)."""
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(mrkdwn, 2_900)}]}


def stop_block(run_id: int) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": f"{STOP_BLOCK_PREFIX}_{run_id}",
        "elements": [
            {
                "type": "button",
                "action_id": STOP_ACTION_ID,
                "text": {"type": "plain_text", "text": "Stop", "emoji": True},
                "style": "danger",
                "value": stop_value(run_id),
            }
        ],
    }


def feedback_block(run_id: int) -> dict[str, Any]:
    """👍/👎 for one answer; a fresh block_id every time (Slack wants one per update)."""
    return {
        "type": "context_actions",
        "block_id": f"{FEEDBACK_BLOCK_PREFIX}_{run_id}_{uuid.uuid4().hex[:10]}",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION_ID,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "Good response"},
                    "accessibility_label": "Mark this answer as good",
                    "value": feedback_value(run_id, "up"),
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "Bad response"},
                    "accessibility_label": "Mark this answer as bad",
                    "value": feedback_value(run_id, "down"),
                },
            }
        ],
    }


def usage_line(usage: Usage) -> str:
    return (
        f"{usage.input + usage.cache_read + usage.cache_write:,} tokens in · "
        f"{usage.output:,} out · ${usage.cost:.4f}"
    )


def escape(text: str) -> str:
    """Slack's three control characters in mrkdwn text (attachments, context)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_BROADCAST = re.compile(r"<(?=!(?:channel|here|everyone|subteam\^))")


def defuse_broadcasts(text: str) -> str:
    """`<!channel>`, `<!here>`, `<!everyone>` and group mentions shown, not sent: a model
    talked into writing one must not notify a whole channel. (People mentions stay.)"""
    return _BROADCAST.sub("<\u200b", text) if "<!" in text else text


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


# -- tool calls ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ToolView:
    """One tool call as shown: running until `ok` is set."""

    call_id: str
    name: str
    label: str
    arguments: dict[str, Any]
    ok: bool | None = None
    output: str = ""
    duration_s: float | None = None


def _code(text: str) -> str:
    # A ``` inside would end the fence early; a zero-width space keeps it literal.
    return "```\n" + escape(text.replace("```", "`\u200b``")) + "\n```"


def _arguments_text(arguments: dict[str, Any]) -> str:
    try:
        text = json.dumps(arguments, ensure_ascii=False, indent=None, default=str)
    except (TypeError, ValueError):
        text = repr(arguments)
    return truncate(text, ARGUMENTS_LIMIT)


def tool_attachment(view: ToolView) -> dict[str, Any]:
    """One legacy attachment: colour by outcome, the label as title, arguments and (cut)
    output in the text so Slack folds it, the duration in the footer."""
    title = truncate(" ".join((view.label or view.name).split()), TITLE_LIMIT)
    parts = [_code(_arguments_text(view.arguments))] if view.arguments else []
    if view.ok is None:
        color, footer = GREY, f"{view.name} · running…"
    else:
        color = GREEN if view.ok else RED
        footer = f"{view.name} · {view.duration_s or 0.0:.1f}s"
        if not view.ok:
            footer += " · failed"
        output = view.output.strip()
        if output:
            if len(output) > OUTPUT_LIMIT:
                output = output[:OUTPUT_LIMIT] + f"\n… ({len(view.output):,} characters in all)"
            parts.append(_code(output))
    return {
        "color": color,
        "title": title,
        "text": "\n".join(parts),
        "footer": footer,
        "fallback": title,
        "mrkdwn_in": ["text"],
    }


def tool_attachments(views: list[ToolView]) -> list[dict[str, Any]]:
    if len(views) <= MAX_TOOL_ATTACHMENTS:
        return [tool_attachment(view) for view in views]
    folded = views[: len(views) - MAX_TOOL_ATTACHMENTS + 1]
    failed = sum(1 for view in folded if view.ok is False)
    summary = {
        "color": RED if failed else GREEN,
        "title": f"{len(folded)} earlier tool calls",
        "text": ", ".join(truncate(view.label or view.name, 40) for view in folded[:30]),
        "footer": f"{failed} failed" if failed else "all succeeded",
        "fallback": f"{len(folded)} earlier tool calls",
        "mrkdwn_in": ["text"],
    }
    rest = views[len(folded) :]
    return [summary, *(tool_attachment(view) for view in rest)]


# -- whole messages -------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class MessageBody:
    """What one chat.postMessage / chat.update carries."""

    text: str
    blocks: list[dict[str, Any]]
    attachments: list[dict[str, Any]] | None = None

    def arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {"text": self.text, "blocks": self.blocks}
        if self.attachments is not None:
            args["attachments"] = self.attachments
        return args


# Anchored on the newline (the text gets one in front): far faster than `^` with MULTILINE.
_FENCE_LINE = re.compile(r"\n {0,3}(`{3,}|~{3,})([^\n]*)")


def _open_fence_line(text: str) -> str | None:
    """The opening line of the code fence still open at the end of `text`, if any. Only
    fence-like lines are visited (found by one regex scan), so a long text costs little."""
    opener: str | None = None
    marker = ""
    for match in _FENCE_LINE.finditer("\n" + text):
        fence, info = match.group(1), match.group(2)
        if opener is None:
            if fence[0] == "`" and "`" in info:
                continue  # backticks in the info string: not a fence
            opener, marker = match.group(0)[1:], fence
        elif fence[0] == marker[0] and len(fence) >= len(marker) and not info.strip():
            opener = None
    return opener


def progress_tail(text: str) -> str:
    """The end of a long answer in progress, fences balanced, within one message. Cheap on
    a long text (it is rendered about once a second while the answer streams)."""
    if len(text) <= MARKDOWN_LIMIT:
        return text
    start = len(text) - (MARKDOWN_LIMIT - 500)  # room for a reopened fence line
    newline = text.find("\n", start)
    cut = newline + 1 if newline != -1 else start
    opener = _open_fence_line(text[:cut])
    tail = (opener + "\n" if opener is not None else "") + text[cut:]
    parts = split_markdown(tail, MARKDOWN_LIMIT)
    return parts[-1] if parts else ""


def progress_message(
    *,
    text: str,
    run_id: int | None,
    tools: list[ToolView],
    status: str,
) -> MessageBody:
    """The in-progress message: `text` (the narration, and the answer so far where it does not
    stream natively), a short status line, the Stop button, and one attachment per tool call."""
    blocks: list[dict[str, Any]] = []
    shown = progress_tail(text)
    if shown.strip():
        blocks.append(markdown_block(shown))
    blocks.append(context_block(status))
    if run_id is not None:
        blocks.append(stop_block(run_id))
    # `text` is mrkdwn (notifications): escaped, so an answer cannot ping @channel there.
    fallback = truncate(escape(shown), TEXT_LIMIT) if shown.strip() else escape(status)
    return MessageBody(fallback, blocks, tool_attachments(tools) if tools else [])


def tools_summary(count: int) -> str:
    return f"Used {count} tool{'s' if count != 1 else ''}." if count else ""


def activity_message(
    *,
    narration: str,
    tools: list[ToolView],
    extras: list[dict[str, Any]],
) -> MessageBody:
    """The in-progress message once the run is over, above the answer: what the model said it
    was doing, how many tools it used and one attachment per call (the Stop button gone);
    `extras` when there is no answer to carry them."""
    blocks: list[dict[str, Any]] = []
    shown = progress_tail(narration)
    if shown.strip():
        blocks.append(markdown_block(shown))
    summary = tools_summary(len(tools))
    if summary:
        blocks.append(context_block(summary))
    blocks += extras
    if not blocks:
        blocks = [context_block("Done.")]
    fallback = truncate(escape(shown), TEXT_LIMIT) if shown.strip() else summary or "Done."
    return MessageBody(fallback, blocks, tool_attachments(tools) if tools else [])


def answer_parts(text: str) -> list[str]:
    """The final text as message-sized parts, fences balanced in each, nothing lost."""
    return split_markdown(text, MARKDOWN_LIMIT)


def final_extras(
    *,
    run_id: int | None,
    outcome_text: str | None,
    feedback: bool,
    usage: Usage | None,
) -> list[dict[str, Any]]:
    """Blocks under the last part of an answer: how it ended, usage, 👍/👎."""
    extras: list[dict[str, Any]] = []
    if outcome_text:
        extras.append(context_block(outcome_text))
    if usage is not None:
        extras.append(context_block(usage_line(usage)))
    if feedback and run_id is not None:
        extras.append(feedback_block(run_id))
    return extras


def answer_message(
    part: str,
    *,
    extras: list[dict[str, Any]],
    attachments: list[dict[str, Any]] | None = None,
) -> MessageBody:
    blocks = [markdown_block(part)] if part.strip() else []
    blocks += extras
    if not blocks:
        blocks = [context_block("Done.")]
    fallback = truncate(escape(part), TEXT_LIMIT) if part.strip() else _extras_text(extras)
    return MessageBody(fallback, blocks, attachments)


def _extras_text(extras: list[dict[str, Any]]) -> str:
    for block in extras:
        if block["type"] == "context":
            return str(block["elements"][0]["text"])
    return "Done."
