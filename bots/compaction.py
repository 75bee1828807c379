"""Compaction: summarise older turns before a conversation overflows the model's context.

Owns: token estimates, the decision to compact, where to cut (never inside a tool batch, so a
call and its result stay together), asking the model for a structured summary, and storing it
(`compact_if_needed`), so a long thread is summarised once, not on every turn.

The size of a context is measured the way the provider counts it where possible: the usage of
the last assistant reply (everything the model was sent plus what it wrote), plus an estimate of
the messages after it. Estimates are ~4 characters per token, which over-counts code and
under-counts nothing common enough to matter for a reserve of thousands of tokens.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from bots.prompt import is_context_note, summary_text
from bots.settings import CompactionSettings
from core.messages import (
    AssistantMessage,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.base import Model, ModelRequest, StreamEnd
from storage.base import (
    Conversation,
    ConversationStore,
    Fence,
    LoadedConversation,
    StoredMessage,
)

log = logging.getLogger(__name__)

IMAGE_TOKENS = 1_600
TOOL_RESULT_CHARS_IN_TRANSCRIPT = 2_000

SUMMARY_SYSTEM_PROMPT = """\
You summarise a team chat conversation between people and an AI assistant, so the assistant \
can continue it without the full history. Write a structured summary in Markdown with exactly \
these sections:

## Goal
What the people are trying to achieve (one to three sentences; several goals if several people).
## Decisions
Decisions made and conclusions reached, with who made them.
## Open questions
Questions and tasks still open, with who asked.
## Facts
Facts, numbers, names, links and constraints the assistant will need later.
## Files touched
Files read, written or edited in the workspace, one per line with what happened to them.

Be specific and complete but terse. If a previous summary is given, merge it in: keep what \
still matters, drop what was resolved. Write only the summary."""


class CompactionFailed(Exception):
    """The model could not produce a summary; `reply` says why."""

    def __init__(self, reply: AssistantMessage) -> None:
        super().__init__(reply.error_message or "no summary")
        self.reply = reply


def estimate_tokens(message: Message) -> int:
    chars = 0
    images = 0
    if isinstance(message, UserMessage):
        if isinstance(message.content, str):
            chars = len(message.content)
        else:
            for part in message.content:
                if isinstance(part, Image):
                    images += 1
                else:
                    chars += len(part.text)
    elif isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, Text):
                chars += len(block.text)
            elif isinstance(block, Thinking):
                chars += len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + len(json.dumps(block.arguments))
            else:
                chars += 200
    else:
        for part in message.content:
            if isinstance(part, Image):
                images += 1
            else:
                chars += len(part.text)
    return chars // 4 + images * IMAGE_TOKENS + 4


def context_tokens(messages: list[Message]) -> int:
    """The tokens `messages` take in a request: the last reply's usage plus what followed."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if (
            isinstance(message, AssistantMessage)
            and message.stop_reason not in ("error", "aborted")
            and message.usage.total_tokens > 0
        ):
            after = sum(estimate_tokens(m) for m in messages[index + 1 :])
            return message.usage.total_tokens + after
    return sum(estimate_tokens(m) for m in messages)


def needs_compaction(tokens: int, context_window: int, reserve_tokens: int) -> bool:
    return tokens > context_window - reserve_tokens


@dataclass(slots=True, frozen=True)
class Cut:
    """Summarise `older`; keep `recent` verbatim."""

    older: list[StoredMessage]
    recent: list[StoredMessage]


def find_cut(messages: list[StoredMessage], keep_recent_tokens: int) -> Cut | None:
    """Where to split: the latest user message with at least `keep_recent_tokens` after it
    that is not inside a tool batch (between an assistant's tool calls and the last of their
    results), so no call is ever separated from its result. Conversations stored before
    history kept delivery order can hold a user message inside a batch. None if nothing would
    be left to summarise."""
    safe = _safe_cuts(messages)
    kept = 0
    cut: int | None = None
    for index in range(len(messages) - 1, 0, -1):
        kept += estimate_tokens(messages[index].message)
        if safe[index]:
            cut = index
            if kept >= keep_recent_tokens:
                break
    if cut is None:
        return None
    return Cut(older=messages[:cut], recent=messages[cut:])


def _safe_cuts(messages: list[StoredMessage]) -> list[bool]:
    """For each index: is it a user message with no tool call before it still unanswered?
    An assistant message closes any batch before it (its calls are then interrupted)."""
    safe: list[bool] = []
    open_calls: set[str] = set()
    for stored in messages:
        message = stored.message
        if isinstance(message, AssistantMessage):
            open_calls = {call.id for call in message.tool_calls()}
        elif isinstance(message, ToolResultMessage):
            open_calls.discard(message.tool_call_id)
        safe.append(isinstance(message, UserMessage) and not open_calls)
    return safe


def transcript_lines(messages: list[Message]) -> list[str]:
    """The older turns as plain text lines for the summariser (tool output clipped)."""
    lines: list[str] = []
    for message in messages:
        if is_context_note(message):
            continue  # the channel's context: given again, current, after the summary
        if isinstance(message, UserMessage):
            name = message.author.name if message.author else "user"
            lines.append(f"{name}: {message.text()}")
        elif isinstance(message, AssistantMessage):
            if message.stop_reason in ("error", "aborted") and not message.text():
                continue
            if message.text():
                lines.append(f"assistant: {message.text()}")
            for call in message.tool_calls():
                lines.append(f"assistant called {call.name}({json.dumps(call.arguments)[:500]})")
        elif isinstance(message, ToolResultMessage):
            text = message.text()
            if len(text) > TOOL_RESULT_CHARS_IN_TRANSCRIPT:
                text = text[:TOOL_RESULT_CHARS_IN_TRANSCRIPT] + " […]"
            status = "error" if message.is_error else "result"
            lines.append(f"{message.tool_name} {status}: {text}")
    return lines


def chunk_lines(lines: list[str], budget_chars: int) -> list[str]:
    """Join lines into chunks of at most `budget_chars` (a longer single line is clipped)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        line = line if len(line) <= budget_chars else line[:budget_chars] + " […]"
        if current and size + len(line) + 1 > budget_chars:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        chunks.append("\n".join(current))
    return chunks


async def summarize(model: Model, previous_summary: str | None, messages: list[Message]) -> str:
    """Ask `model` for a structured summary of `messages`, merged with `previous_summary`.

    A transcript larger than the model's window is summarised chunk by chunk, each chunk
    merged into the summary so far. Raises `CompactionFailed` with the model's reply."""
    budget_chars = max(4_000, (model.info.context_window - 4_096 - 2_000) * 3)
    summary = previous_summary
    for chunk in chunk_lines(transcript_lines(messages), budget_chars):
        parts = []
        if summary:
            parts += ["PREVIOUS SUMMARY:", summary.strip(), "", "CONVERSATION SINCE:"]
        parts.append(chunk)
        request = ModelRequest(
            system_prompt=SUMMARY_SYSTEM_PROMPT,
            messages=[UserMessage(content="Summarise this conversation:\n\n" + "\n".join(parts))],
            max_tokens=4_096,
        )
        final: AssistantMessage | None = None
        async for event in model.stream(request):
            if isinstance(event, StreamEnd):
                final = event.message
        if final is None or final.stop_reason == "error" or not final.text().strip():
            raise CompactionFailed(
                final or AssistantMessage(stop_reason="error", error_message="no reply")
            )
        summary = final.text().strip()
    if summary is None:
        raise CompactionFailed(AssistantMessage(stop_reason="error", error_message="nothing to do"))
    return summary


def context_messages(loaded: LoadedConversation) -> list[Message]:
    """What a run sends from a loaded conversation: the summary (if any), then the messages."""
    messages: list[Message] = []
    if loaded.compaction is not None and loaded.compaction.summary:
        messages.append(UserMessage(content=summary_text(loaded.compaction.summary)))
    messages.extend(stored.message for stored in loaded.messages)
    return messages


async def compact_if_needed(
    store: ConversationStore,
    settings: CompactionSettings,
    conversation: Conversation,
    loaded: LoadedConversation,
    model: Model,
    *,
    force: bool,
    fence: Fence | None = None,
) -> LoadedConversation:
    """Summarise older turns and store the summary if the next request would not fit (or if
    `force`, after the model reported an overflow). Returns what the run should send from.
    `fence`: the run's lease (a shared store refuses the summary once it changed hands)."""
    tokens = context_tokens(context_messages(loaded))
    window = model.info.context_window
    if not force and not needs_compaction(tokens, window, settings.reserve_tokens):
        return loaded
    keep = settings.keep_recent_tokens if not force else settings.keep_recent_tokens // 2
    cut = find_cut(loaded.messages, keep)
    if cut is None:
        return loaded
    previous = loaded.compaction.summary if loaded.compaction else None
    try:
        summary = await summarize(model, previous, [stored.message for stored in cut.older])
    except CompactionFailed as failed:
        log.warning("compaction of %s failed: %s", conversation.key, failed)
        return loaded
    up_to = cut.older[-1].seq
    stored = await store.add_compaction(
        conversation.id,
        summary,
        up_to,
        {"tokens_before": tokens, "messages_summarised": len(cut.older)},
        fence=fence,
    )
    log.info("compacted %s up to seq %s (%s tokens)", conversation.key, up_to, tokens)
    return LoadedConversation(conversation=conversation, compaction=stored, messages=cut.recent)
