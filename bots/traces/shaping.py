"""What a trace keeps of a run's steps: secrets masked, every size bounded.

Owns: `Shaper`, turning a model reply, a tool call, a steered message or an error into the
small JSON object a `TraceEvent` stores: configured secret values and credential-shaped
strings replaced with `[redacted]`, arguments and results cut to `MAX_FIELD_CHARS` with their
full length noted (the console shows the cut text, expandable to that bound).

Must not: do IO; keep anything between calls but the secrets it masks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from bots.errors import RedactSecrets
from core.messages import AssistantMessage, ToolResultMessage, UserMessage

__all__ = ["MAX_FIELD_CHARS", "MAX_SHORT_CHARS", "Shaper"]

MAX_FIELD_CHARS = 8_000  # a tool call's arguments or result, as stored
MAX_SHORT_CHARS = 1_000  # an error, a steered message, a stop reason
# Credentials by their well-known shapes (the same families memory refuses to keep).
_CREDENTIAL = re.compile(
    r"xox[abposr]-[0-9A-Za-z-]{8,}|xapp-[0-9A-Za-z-]{8,}|sk-ant-[0-9A-Za-z_-]{8,}"
    r"|sk-[0-9A-Za-z]{20,}|gh[pousr]_[0-9A-Za-z]{20,}|github_pat_[0-9A-Za-z_]{20,}"
    r"|AKIA[0-9A-Z]{16}|glpat-[0-9A-Za-z_-]{20}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
    r"|eyJ[0-9A-Za-z_-]{10,}\.[0-9A-Za-z_-]{10,}\.[0-9A-Za-z_-]{10,}",
)


class Shaper:
    """Masks the process's secrets and bounds sizes for one recorder."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = RedactSecrets(secrets)

    def text(self, value: str, limit: int) -> dict[str, Any]:
        """`value` masked and cut to `limit`, with its full length when it was cut."""
        shaped: dict[str, Any] = {"text": self._masked(value, limit)}
        if len(value) > limit:
            shaped["chars"] = len(value)
        return shaped

    def short(self, value: str | None) -> str | None:
        if value is None:
            return None
        return self._masked(value, MAX_SHORT_CHARS)

    def _masked(self, value: str, limit: int) -> str:
        """`value` masked, then cut to `limit` (masked over twice that, so that a credential
        straddling the cut is still recognised)."""
        if not value:
            return value
        return _CREDENTIAL.sub("[redacted]", self._secrets.redact(value[: limit * 2]))[:limit]

    def model_call(self, message: AssistantMessage, turn: int | None) -> dict[str, Any]:
        usage = message.usage
        shaped: dict[str, Any] = {
            "turn": turn,
            "model": message.model[:100],
            "input": usage.input,
            "output": usage.output,
            "cache_read": usage.cache_read,
            "cache_write": usage.cache_write,
            "cost": usage.cost,
            "stop_reason": message.stop_reason,
        }
        if message.stop_reason == "tool_use":
            shaped["tool_calls"] = len(message.tool_calls())
        if message.error_kind is not None or message.error_message is not None:
            shaped["error_kind"] = message.error_kind
            shaped["error"] = self.short(message.error_message)
        return shaped

    def tool_call(
        self, name: str, label: str, arguments: dict[str, Any], result: ToolResultMessage
    ) -> dict[str, Any]:
        try:  # most calls of a steered run take no arguments: no encoder for those
            args_text = (
                json.dumps(arguments, ensure_ascii=False, default=str) if arguments else "{}"
            )
        except ValueError:  # a cycle: cannot happen with JSON from the model, kept safe
            args_text = repr(arguments)
        output = result.text()
        return {
            "tool": name[:200],
            "label": self.short(label) or name[:200],
            "arguments": self.text(args_text, MAX_FIELD_CHARS),
            "result": self.text(output, MAX_FIELD_CHARS),
            "error": self.short(output) if result.is_error else None,
        }

    def steer(self, message: UserMessage) -> dict[str, Any]:
        author = message.author
        return {
            "author_id": author.id[:200] if author else None,
            "author": author.name[:200] if author else None,
            "text": self.short(message.text()),
        }
