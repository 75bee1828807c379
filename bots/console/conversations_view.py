"""What the Conversations, conversation and Feedback pages show, as plain values.

Owns: reading a page's filters from a hostile query string (`read_filter`: every value
bounded, dates as UTC days, unknown values ignored), the link to a conversation's Slack or
Discord thread (`thread_link`), the thread as people saw it (`thread_lines`) and each trace
event as a few labelled facts (`trace_step`). Whether a conversation is a direct message is
`bots.console.web.is_direct_message`.

Must not: do IO, render HTML (templates do, escaping everything), or know a store's SQL.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bots.prompt import is_context_note, without_header
from core.messages import AssistantMessage, UserMessage
from storage.base import ConversationFilter, StoredMessage, TraceEvent

__all__ = [
    "HIDDEN",
    "ThreadLine",
    "TraceStep",
    "read_filter",
    "thread_lines",
    "thread_link",
    "trace_step",
]

MAX_FIELD = 300  # a filter's value, as read
MAX_LINE_CHARS = 20_000  # a message as shown (a longer one ends with a note)
HIDDEN = "(a direct message: its text is hidden)"
OUTCOMES = ("done", "error", "aborted", "interrupted", "running")
_DAY = 86_400


def _value(query: Mapping[str, str], name: str) -> str | None:
    value = (query.get(name) or "").strip()[:MAX_FIELD]
    return value or None


def _day(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        day = dt.date.fromisoformat(value[:10])
    except ValueError:
        return None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def read_filter(query: Mapping[str, str]) -> ConversationFilter:
    """The Conversations page's filter from its query string; what cannot be read is left
    out (a bad date filters nothing, rather than failing the page)."""
    platform = _value(query, "platform")
    if platform is not None and not (platform.isascii() and platform.isalpha()):
        platform = None
    outcome = _value(query, "outcome")
    feedback = _value(query, "feedback")
    until = _day(_value(query, "until"))
    return ConversationFilter(
        platform=platform.lower() if platform else None,
        channel_key=_value(query, "channel"),
        person=_value(query, "person"),
        outcome=outcome if outcome in OUTCOMES else None,
        feedback="up" if feedback == "up" else "down" if feedback == "down" else None,
        since=_day(_value(query, "since")),
        until=None if until is None else until + _DAY,  # the whole day named
        search=_value(query, "q"),
    )


def thread_link(conversation_key: str) -> str | None:
    """Where people see the conversation, or None (the terminal, a key of another shape)."""
    parts = conversation_key.split(":")
    if parts[0] == "slack" and len(parts) == 4 and all(_plain(p) for p in parts[1:]):
        team, channel, ts = parts[1:]
        return f"https://app.slack.com/client/{team}/{channel}/thread/{channel}-{ts}"
    if parts[0] == "discord" and len(parts) == 3 and all(_plain(p) for p in parts[1:]):
        guild, channel = parts[1:]
        return f"https://discord.com/channels/{'@me' if guild == 'dm' else guild}/{channel}"
    return None


def _plain(part: str) -> bool:
    return bool(part) and len(part) <= 64 and all(c.isalnum() or c in "._-" for c in part)


@dataclass(slots=True, frozen=True)
class ThreadLine:
    seq: int
    who: str
    at: float
    text: str
    assistant: bool


def thread_lines(messages: Sequence[StoredMessage], *, hide_text: bool) -> list[ThreadLine]:
    """The conversation as people saw it: their messages and the answers' text (tool calls
    and results are in the runs' traces; Teammate's own context notes are left out)."""
    lines: list[ThreadLine] = []
    for stored in messages:
        message = stored.message
        if isinstance(message, UserMessage) and not is_context_note(message):
            who, text = "someone", message.text()
            if message.author is not None:  # shown beside it: the model's header, left out
                who, text = message.author.name, without_header(message.author, text)
            text = HIDDEN if hide_text else _bounded(text)
            lines.append(ThreadLine(stored.seq, who, message.timestamp, text, False))
        elif isinstance(message, AssistantMessage) and message.text().strip():
            text = HIDDEN if hide_text else _bounded(message.text())
            lines.append(ThreadLine(stored.seq, "Teammate", message.timestamp, text, True))
    return lines


def _bounded(text: str, limit: int = MAX_LINE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"


@dataclass(slots=True, frozen=True)
class TraceStep:
    """One trace event for people: what happened, its facts, and long texts to expand."""

    kind: str
    title: str
    duration_ms: float | None
    facts: list[tuple[str, str]] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)  # (label, text)
    failed: bool = False


def trace_step(event: TraceEvent, *, hide_text: bool) -> TraceStep:
    """`event` as people read it; with `hide_text` (a direct message) no text people or
    tools wrote is shown, only counts, names and timings."""
    data = event.data
    match event.kind:
        case "model_call":
            return _model_call(event, data)
        case "tool_call":
            return _tool_call(event, data, hide_text)
        case "steer":
            text = HIDDEN if hide_text else str(data.get("text") or "")
            title = f"Steered in by {data.get('author') or 'someone'}"
            return TraceStep("steer", title, None, [("message", text)])
        case "stop":
            scope = "this run" if data.get("scope") == "run" else "the conversation"
            facts = [("stopped", scope), ("who", str(data.get("by_id") or "—"))]
            return TraceStep("stop", f"Stopped by {data.get('by') or 'someone'}", None, facts)
        case "compaction":
            facts = [("forced", "yes" if data.get("forced") else "no")]
            if data.get("up_to_seq") is not None:
                facts.append(("summarised up to message", str(data["up_to_seq"])))
            return TraceStep("compaction", "Older turns summarised", None, facts)
        case "error":
            facts = [("reference", str(data.get("reference") or "—"))]
            if data.get("text"):
                facts.append(("told people", str(data["text"])))
            return TraceStep("error", "Error", None, facts, failed=True)
        case "end":
            facts = [("reason", str(data.get("reason", "")))]
            if data.get("message"):
                facts.append(("message", str(data["message"])))
            return TraceStep("end", "Loop ended", None, facts)
        case "answer":
            facts = []
            if isinstance(data.get("first_post_ms"), int | float):
                facts.append(("first visible post after", f"{data['first_post_ms']:,.0f} ms"))
            return TraceStep(
                "answer", "Answer shown (after the run started)", event.duration_ms, facts
            )
        case _:
            return TraceStep(
                event.kind, event.kind, event.duration_ms, [("data", json.dumps(data)[:500])]
            )


def _model_call(event: TraceEvent, data: Mapping[str, Any]) -> TraceStep:
    facts = [
        ("model", str(data.get("model", ""))),
        ("tokens in", f"{int(data.get('input') or 0):,}"),
        ("out", f"{int(data.get('output') or 0):,}"),
        ("cache read", f"{int(data.get('cache_read') or 0):,}"),
        ("cache write", f"{int(data.get('cache_write') or 0):,}"),
        ("cost", f"${float(data.get('cost') or 0):.4f}"),
        ("stop reason", str(data.get("stop_reason", ""))),
    ]
    failed = bool(data.get("error"))
    if failed:
        facts.append(("error", str(data.get("error"))))
    turn = data.get("turn")
    title = "Model call" if turn is None else f"Model call (turn {turn})"
    return TraceStep("model_call", title, event.duration_ms, facts, failed=failed)


def _tool_call(event: TraceEvent, data: Mapping[str, Any], hide_text: bool) -> TraceStep:
    error = data.get("error")
    tool = str(data.get("tool") or "tool")
    facts = [("tool", tool)]
    if error:
        facts.append(("error", HIDDEN if hide_text else str(error)))
    details = []
    if not hide_text:
        details = [
            ("arguments", _stored_text(data.get("arguments"))),
            ("result", _stored_text(data.get("result"))),
        ]
    title = f"Tool: {tool if hide_text else str(data.get('label') or tool)}"
    return TraceStep("tool_call", title, event.duration_ms, facts, details, failed=bool(error))


def _stored_text(value: Any) -> str:
    """A stored, bounded field (`{"text": …, "chars": n}`) as shown."""
    if not isinstance(value, dict):
        return ""
    text = str(value.get("text", ""))
    chars = value.get("chars")
    if isinstance(chars, int) and chars > len(text):
        text += f"\n… (cut: {chars:,} characters in all)"
    return text
