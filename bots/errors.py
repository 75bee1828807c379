"""What people are told when something goes wrong, and how it is tied to the log.

Owns: short, useful texts for model failures by `ErrorKind`, reference ids for unexpected
failures, and the log filter that keeps secrets out of every log line.

Rule: a text written for people is shown as written; anything unexpected is logged with its
traceback under a reference id, and people see only the id. No secret reaches a log or a chat.
"""

from __future__ import annotations

import logging
import secrets as _secrets
import sqlite3
from collections.abc import Iterable

from core.messages import AssistantMessage

_MODEL_ERRORS: dict[str, str] = {
    "overloaded": "The model is overloaded right now. Try again in a minute.",
    "rate_limited": "The model's rate limit was reached. Try again in a minute.",
    "authentication": (
        "I can't use the model: its API key was refused. An admin should check ANTHROPIC_API_KEY."
    ),
    "connection": "I couldn't reach the model (a network problem). Try again shortly.",
    "server": "The model's service had an internal error. Try again shortly.",
    "context_overflow": (
        "This conversation is too long for the model, even after summarising it. "
        "Start a new thread to continue."
    ),
    "refusal": "The model declined to answer that.",
}


def describe_model_error(reply: AssistantMessage | None, fallback: str | None = None) -> str:
    """A short text for people about a failed model reply."""
    if reply is not None and reply.error_kind in _MODEL_ERRORS:
        return _MODEL_ERRORS[reply.error_kind]
    detail = (reply.error_message if reply else None) or fallback
    return f"The model call failed: {detail}" if detail else "The model call failed."


def new_reference() -> str:
    """A short id people can quote and operators can grep for."""
    return _secrets.token_hex(4)


def unexpected_failure_text(reference: str) -> str:
    return f"Something went wrong on my side (reference {reference}). The team can look it up."


# What aiosqlite raises (as ValueError) once its connection or worker thread is gone.
_AIOSQLITE_GONE = frozenset({"Connection closed", "no active connection"})


def is_storage_failure(exc: BaseException) -> bool:
    """Whether `exc` says the database or its disk failed (locked, full, read-only, gone),
    as opposed to a bug: then people are told what is wrong, not just a reference."""
    if isinstance(exc, sqlite3.Error | OSError):  # OSError covers a lost connection
        return True
    if isinstance(exc, ValueError) and str(exc) in _AIOSQLITE_GONE:
        return True  # aiosqlite's connection (its worker thread) is gone
    return type(exc).__module__.split(".", 1)[0] == "asyncpg"


def _storage_detail(exc: BaseException) -> str:
    said = str(exc).lower()
    if "full" in said or "no space" in said:
        return "the disk is full"
    if "locked" in said or "busy" in said:
        return "the database is locked by another program"
    if "readonly" in said or "read-only" in said:
        return "the database is read-only"
    return "the database is unavailable"


def storage_failure_text(exc: BaseException, reference: str, *, accepting: bool) -> str:
    """What people see when the database fails: what is wrong and what to do."""
    detail = _storage_detail(exc)
    if accepting:
        return (
            f"I couldn't save your message ({detail}; reference {reference}), so I can't "
            "answer it. Please send it again in a minute."
        )
    return (
        f"I couldn't save this answer ({detail}; reference {reference}). What was said "
        "before is kept; ask again in a minute."
    )


class RedactSecrets(logging.Filter):
    """Replaces every known secret value in a log record's message and arguments."""

    def __init__(self, values: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret containing another is replaced whole.
        self._values = sorted({v for v in values if len(v) >= 6}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._values:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg = self.redact(message)
        record.args = None
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def install_redaction(values: Iterable[str]) -> RedactSecrets:
    """Attach the redacting filter to every handler of the root logger (and future records)."""
    redactor = RedactSecrets(values)
    root = logging.getLogger()
    for handler in root.handlers:
        handler.addFilter(redactor)
    return redactor
