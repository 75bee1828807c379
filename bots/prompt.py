"""What the model is told: the system prompt, the channel's context and the header of each user
message.

Owns: the base system prompt, its composition with a platform's formatting rules and the
deployment's own prompt, the channel context note (the channel's instructions and memory), the
user-message header that carries volatile facts (who is speaking, when), and the backfill
message (a thread's earlier messages, when Teammate is first mentioned in it).

The system prompt is byte-identical for every conversation of a platform, run after run: a pure
function of (platform rules, the deployment's prompt), with no channel, time, user, tool list or
counter in it. It must be: the models that preserve thinking check each replayed thinking block
against everything before it, so editing the system prompt of a conversation invalidates its
earlier reasoning (docs/architecture.md, "Preserved thinking"). What a channel's admins and
members can change while conversations go on (its instructions, its memory) is appended to the
conversation as a context note when it changed (`channel_context_note`), never edited into
what was already sent; volatile facts go into the user message header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from bots.incoming import BackfillMessage
from core.messages import Author, Message, UserMessage

BASE_PROMPT = """\
You are Teammate, an AI assistant that a team shares in its chat. Several people may talk to you \
in one conversation; each of their messages starts with a header in square brackets naming the \
person and the time, like `[Sam (U123) · 2025-01-31 09:15 UTC]`. Address people by name when it \
helps, and keep track of who asked for what. The header is added by the chat system: never write \
such headers yourself.

How to work:
- Answer directly and concisely; people read you in a chat thread. Lead with the answer.
- Use your tools when they help; say briefly what you are doing before long tool work.
- Tool results are shown to people in a compact, collapsed form, so summarise what matters.
- If a request is ambiguous, ask one short clarifying question.
- If you cannot do something, say so plainly and suggest what could work instead.
- Never reveal secrets, tokens or credentials, even if asked or if you find them in files."""

SUMMARY_OPEN = "<conversation-summary>"
SUMMARY_CLOSE = "</conversation-summary>"


PlatformRules: TypeAlias = str | Mapping[str, str]


def rules_for(platform_rules: PlatformRules, channel_key: str) -> str:
    """The formatting rules for a channel: one text for every channel, or the text of the
    channel key's platform (`slack:…` → "slack") when one process serves several platforms,
    so a Slack channel's prompt never carries Discord's rules (and stays byte-stable)."""
    if isinstance(platform_rules, str):
        return platform_rules
    platform = channel_key.partition(":")[0]
    if platform in platform_rules:
        return platform_rules[platform]
    return "\n\n".join(platform_rules[name] for name in sorted(platform_rules))


TOOLS_NOTE = (
    "Your tools, when a channel gives you any, work inside that channel's workspace directory, "
    "which the channel's conversations share."
)
CONTEXT_INTRO = (
    "The channel's context, from the chat system (not from a person in the conversation). It "
    "replaces any earlier channel context in this conversation."
)
CONTEXT_OPEN = "<channel-context>"
CONTEXT_CLOSE = "</channel-context>"
INSTRUCTIONS_INTRO = "Instructions for this channel, set by its admins:"
NO_CONTEXT_TEXT = "This channel has no instructions and no memory now."


def system_prompt(*, platform_rules: str, global_prompt: str = "") -> str:
    """The stable system prompt of a platform's conversations."""
    parts = [BASE_PROMPT, "Formatting:\n" + platform_rules.strip(), TOOLS_NOTE]
    if global_prompt.strip():
        parts.append(global_prompt.strip())
    return "\n\n".join(parts)


def channel_context_text(*, instructions: str, memory: str) -> str:
    """The channel context note's text: a pure function of the channel's instructions and its
    memory block, or "" when the channel has neither."""
    parts = []
    if instructions.strip():
        parts.append(f"{INSTRUCTIONS_INTRO}\n{instructions.strip()}")
    if memory:
        parts.append(memory)
    if not parts:
        return ""
    return _context_note_text("\n\n".join(parts))


def _context_note_text(body: str) -> str:
    return f"{CONTEXT_OPEN}\n{CONTEXT_INTRO}\n\n{body}\n{CONTEXT_CLOSE}"


def is_context_note(message: Message) -> bool:
    """A context note is written by Teammate: no author, and its text opens with the tag (a
    person's message always has an author and begins with the header)."""
    return (
        isinstance(message, UserMessage)
        and message.author is None
        and isinstance(message.content, str)
        and message.content.startswith(CONTEXT_OPEN)
    )


def channel_context_note(messages: Sequence[Message], wanted: str) -> UserMessage | None:
    """The note to append so the model's view of the channel is `wanted`, or None when the
    last note it was given (in the messages it will see) already says that. A conversation
    that never had a note and has nothing to say needs none; one whose instructions or memory
    were removed is told so."""
    last = next((m for m in reversed(messages) if is_context_note(m)), None)
    shown = last.text() if isinstance(last, UserMessage) else None
    if wanted:
        return None if shown == wanted else UserMessage(content=wanted)
    if shown is None or NO_CONTEXT_TEXT in shown:
        return None
    return UserMessage(content=_context_note_text(NO_CONTEXT_TEXT))


def user_header(author: Author, timestamp: float) -> str:
    when = datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"[{author.name} ({author.id}) · {when}]"


def attributed_text(author: Author, timestamp: float, text: str) -> str:
    """A user message's text as the model reads it: the header, then what they wrote."""
    return f"{user_header(author, timestamp)}\n{text}"


def without_header(author: Author, text: str) -> str:
    """What the person wrote, for people who see the author beside it: the text less the
    header `attributed_text` put first (any header of theirs: the clock's format may change)."""
    first, newline, rest = text.partition("\n")
    opens = f"[{author.name} ({author.id}) · "
    return rest if newline and first.startswith(opens) and first.endswith("]") else text


def summary_text(summary: str) -> str:
    return (
        f"{SUMMARY_OPEN}\nThe earlier part of this conversation was summarised to save space:\n"
        f"{summary.strip()}\n{SUMMARY_CLOSE}"
    )


BACKFILL_INTRO = "Earlier messages in this thread, before you were mentioned:"


def backfill_message(earlier: Sequence[BackfillMessage]) -> UserMessage:
    """A thread's earlier messages as one attributed user message (Teammate's own replies
    quoted as "you (Teammate)")."""
    lines = [BACKFILL_INTRO]
    for message in earlier:
        author = message.author
        if message.from_assistant:
            author = Author(id=author.id, name="you (Teammate)")
        lines.append(f"{user_header(author, message.timestamp)}\n{message.text}")
    return UserMessage(content="\n\n".join(lines), timestamp=earlier[0].timestamp)
