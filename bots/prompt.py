"""What the model is told: the system prompt and the header of each user message.

Owns: the base system prompt, its composition with a platform's formatting rules and a channel's
additions, the user-message header that carries volatile facts (who is speaking, when), and the
backfill message (a thread's earlier messages, when Teammate is first mentioned in it).

The system prompt must be byte-identical from turn to turn so the prompt cache holds: it is a
pure function of (platform rules, channel additions, tool names), with no time, no user and no
counters in it. Everything volatile goes into the user message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from bots.incoming import BackfillMessage
from core.messages import Author, UserMessage
from core.tools import AnyTool

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


def system_prompt(
    *,
    platform_rules: str,
    channel_prompt: str = "",
    global_prompt: str = "",
    tools: Sequence[AnyTool] = (),
) -> str:
    """The stable system prompt for one channel."""
    parts = [BASE_PROMPT, "Formatting:\n" + platform_rules.strip()]
    if tools:
        listing = "\n".join(f"- {tool.name}: {tool.label}" for tool in tools)
        parts.append(
            "Your tools work inside this channel's workspace directory, which the channel's "
            f"conversations share:\n{listing}"
        )
    else:
        parts.append("You have no tools in this channel.")
    for extra in (global_prompt, channel_prompt):
        if extra.strip():
            parts.append(extra.strip())
    return "\n\n".join(parts)


def user_header(author: Author, timestamp: float) -> str:
    when = datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"[{author.name} ({author.id}) · {when}]"


def attributed_text(author: Author, timestamp: float, text: str) -> str:
    """A user message's text as the model reads it: the header, then what they wrote."""
    return f"{user_header(author, timestamp)}\n{text}"


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
