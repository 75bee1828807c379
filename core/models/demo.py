"""The keyless demo model: shows what Teammate does, without pretending to be a language model.

Owns: `demo_reply`, the rules by which `--model demo` answers, and `create_demo_model`. It reads
the newest request and either calls one of the run's real tools — list the files (`ls`), read
one (`read`), search for a word (`grep`), keep or drop a note (`remember`, `forget`) — when the
question asks for it in plain words, or answers from the tool's result, or says what it can do.
Every answer is labelled "(demo model)", streams word by word (so stop and steering can be seen
at work), and costs nothing.

Must not: invent content: what it says of files comes from the tools' own results, quoted.
"""

from __future__ import annotations

import re
from typing import Any

from core.messages import Message, ToolResultMessage, UserMessage
from core.models.base import ModelInfo, ModelRequest, Prices
from core.models.scripted import Reply, ScriptedModel, call

DEMO_INFO = ModelInfo(
    id="demo",
    provider="demo",
    context_window=200_000,
    max_output_tokens=8_192,
    prices=Prices(),  # free: /usage shows tokens and $0
    supports_thinking=False,
)
LABEL = "(demo model) "
CAN_DO = (
    "I'm Teammate's demo model: no language model and no key, just a few plain rules, so you "
    "can see how Teammate works. Ask me to *list the files*, *read README.md*, *search for "
    "TODO*, *remember that we deploy on Tuesdays* or *forget note 1*; you can type while I "
    "answer (your message is steered into the run), and /stop stops me."
)
QUOTE_CHARS = 1_500
# Plain-word intents, first match wins: (pattern, tool, arguments from the match).
_INTENTS: list[tuple[re.Pattern[str], str, Any]] = [
    (
        re.compile(r"\bremember(?: that)?\s+(.+)", re.I | re.S),
        "remember",
        lambda m: {"note": m.group(1).strip()},
    ),
    (
        re.compile(r"\bforget(?: note)?\s+#?(\d+)", re.I),
        "forget",
        lambda m: {"id": int(m.group(1))},
    ),
    (
        re.compile(r"\b(?:read|show|open|cat)\s+[`'\"]?([\w./-]+)", re.I),
        "read",
        lambda m: {"path": m.group(1).strip("`'\".,")},
    ),
    (
        re.compile(r"\b(?:search|grep|find)(?: for)?\s+[`'\"]?([\w.-]+)", re.I),
        "grep",
        lambda m: {"pattern": re.escape(m.group(1))},
    ),
    (
        re.compile(r"\b(?:list|files|ls|what'?s here|directory)\b", re.I),
        "ls",
        lambda m: {"path": "."},
    ),
]


def create_demo_model() -> ScriptedModel:
    return ScriptedModel(default=demo_reply, info=DEMO_INFO, record=False)


def demo_reply(request: ModelRequest) -> Reply:
    """The next reply: what the tools just returned, quoted, and a call of each tool the
    questions asked since the last reply want (several, when people typed while it worked), or
    what the demo can do."""
    messages = request.messages
    tools = {tool.name for tool in request.tools}
    since = _since_last_reply(messages)
    results = [m for m in since if isinstance(m, ToolResultMessage)]
    calls = []
    for question in (_question(m) for m in since if isinstance(m, UserMessage)):
        for pattern, tool, arguments in _INTENTS:
            found = pattern.search(question or "")
            if found is not None and tool in tools:
                calls.append(call(tool, arguments(found)))
                break
    parts = [_quote(result) for result in results]
    if calls:
        parts.append("Calling " + ", ".join(f"`{c.name}`" for c in calls) + ".")
    return _say("\n\n".join(parts) if parts else CAN_DO, tool_calls=calls)


def _since_last_reply(messages: list[Message]) -> list[Message]:
    for index in range(len(messages) - 1, -1, -1):
        if not isinstance(messages[index], ToolResultMessage | UserMessage):
            return messages[index + 1 :]
    return messages


def _question(message: UserMessage) -> str | None:
    """What a person asked, without the header the runner adds; None for Teammate's own notes
    (the channel context note, a summary: they have no author)."""
    if message.author is None and message.text().startswith("<"):
        return None
    text = message.text()
    return text.split("\n", 1)[1] if text.startswith("[") and "\n" in text else text


def _quote(result: ToolResultMessage) -> str:
    text = result.text().strip() or "(nothing)"
    if len(text) > QUOTE_CHARS:
        text = text[: QUOTE_CHARS - 1] + "…"
    verdict = "failed" if result.is_error else "says"
    return f"`{result.tool_name}` {verdict}:\n```\n{text}\n```"


def _say(text: str, *, tool_calls: list[Any] | None = None) -> Reply:
    return Reply(
        text=LABEL + text,
        tool_calls=tool_calls or [],
        chunk_size=6,
        chunk_delay_s=0.015,  # streams visibly, so stop and steering have a moment to act
    )
