"""What of an assistant reply people see as text while a run works: its narration.

Owns: the one rule every surface follows. A reply that goes on to call tools narrates with its
`Text` parts; when it has none (the 5.5 models write that progress text inside thinking, shown
to us only as `display: "summarized"`), the text of its `Thinking` parts stands in, stripped
and bounded. A final answer (no tool calls) never shows its thinking, and neither does a reply
that failed or was stopped.

Must not: know a platform, or render anything (each surface presents narration its own way).
"""

from __future__ import annotations

from core.messages import AssistantMessage, Thinking

# Summarized thinking can run to paragraphs: a glimpse of progress, not a transcript.
NARRATION_CHARS = 600
ELLIPSIS = "…"


def thinking_narration(message: AssistantMessage, limit: int = NARRATION_CHARS) -> str:
    """The thinking that narrates `message`, or "": only for a completed reply that calls
    tools and has no text of its own. Thinking blocks are joined by a blank line, blank ones
    skipped; more than `limit` characters are cut at a word and end with an ellipsis."""
    if message.text().strip() or not message.tool_calls():
        return ""
    if message.stop_reason in ("error", "aborted"):
        return ""  # cut short: what it was about to do never happened
    pieces = [
        part.thinking.strip()
        for part in message.content
        if isinstance(part, Thinking) and part.thinking.strip()
    ]
    return _bounded("\n\n".join(pieces), limit)


def visible_text(message: AssistantMessage) -> str:
    """The text `message` shows as: its own text (unchanged, as it streamed), else its
    thinking narration, else ""."""
    text = message.text()
    return text if text.strip() else thinking_narration(message)


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(limit - len(ELLIPSIS), 0)]
    # End at a word when one ends reasonably close, so the glimpse does not stop mid-word.
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= len(cut) * 3 // 4:
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS
