"""The audit log as people's actions write it: who changed what, from which surface.

Owns: `record_action`, the one way features, platforms and the console write an entry (secrets
masked, every size bounded, a failure to write logged and raised like any storage failure);
`actor_of` / `origin_of`, how an entry names a platform's person and surface from a channel key.
The entries are stored append-only by `storage.audit_log` (the tables refuse UPDATE/DELETE).

What is written: configuration changes, memory changes people make with commands, resets,
stops, console sign-ins and links, approval requests and decisions (action names below). The
model's own memory notes are not admin actions: the note itself records who asked.

Must not: import a platform; decide who may act (callers check first, then record).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from core.messages import Author
from storage.base import ConversationStore

__all__ = [
    "ACTIONS",
    "actor_of",
    "bounded_detail",
    "origin_of",
    "record_action",
]

log = logging.getLogger(__name__)

ACTIONS = frozenset(
    {
        "config.set",
        "memory.add",
        "memory.forget",
        "memory.clear",
        "conversation.reset",
        "run.stop",
        "console.sign_in",
        "console.link",
        "console.feedback_review",
        "approval.request",
        "approval.decision",
    }
)
MAX_TEXT = 2_000  # one string in the detail
MAX_ITEMS = 50  # entries of one list or mapping in the detail
MAX_DEPTH = 4
MAX_FIELD = 300  # actor, target, origin
MASKED = "[redacted]"
# A detail key naming a secret: its value is never written, whatever it holds.
_SECRET_KEY = re.compile(r"token|secret|password|passwd|api[_-]?key|authorization|cookie", re.I)


def actor_of(channel_key: str, by: Author | str) -> str:
    """`"slack:U0123"`: the person, qualified by the platform the channel key names."""
    user_id = by.id if isinstance(by, Author) else by
    return f"{origin_of(channel_key)}:{user_id}"


def origin_of(channel_key: str) -> str:
    """The platform a channel key belongs to ("slack:T1:C1" → "slack")."""
    platform, _, _ = channel_key.partition(":")
    return platform or "unknown"


async def record_action(
    store: ConversationStore,
    *,
    actor: str,
    action: str,
    target: str,
    origin: str,
    detail: Mapping[str, Any] | None = None,
    secrets: Sequence[str] = (),
) -> None:
    """Write one entry. `secrets`: values to mask wherever they appear (tokens, passwords)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    masks = sorted({value for value in secrets if len(value) >= 6}, key=len, reverse=True)
    try:
        await store.append_audit(
            actor=_field(actor, masks),
            action=action,
            target=_field(target, masks),
            origin=_field(origin, masks),
            detail=bounded_detail(detail or {}, masks),
        )
    except Exception:
        log.error("the audit entry %s by %s on %s could not be written", action, actor, target)
        raise


def bounded_detail(detail: Mapping[str, Any], secrets: Sequence[str] = ()) -> dict[str, Any]:
    """`detail` as JSON-safe values: secret-named keys masked, known secrets masked in text,
    strings cut at `MAX_TEXT`, lists and mappings at `MAX_ITEMS`, nesting at `MAX_DEPTH`."""
    bounded = _bounded(dict(detail), secrets, 0)
    assert isinstance(bounded, dict)
    return bounded


def _bounded(value: Any, secrets: Sequence[str], depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _text(value, secrets)
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())
        bounded = {
            _text(str(key), secrets, MAX_FIELD): (
                MASKED if _SECRET_KEY.search(str(key)) else _bounded(item, secrets, depth + 1)
            )
            for key, item in items[:MAX_ITEMS]
        }
        if len(items) > MAX_ITEMS:
            bounded["…"] = f"{len(items) - MAX_ITEMS} more"
        return bounded
    if isinstance(value, list | tuple | set | frozenset):
        listed = list(value)
        kept = [_bounded(item, secrets, depth + 1) for item in listed[:MAX_ITEMS]]
        if len(listed) > MAX_ITEMS:
            kept.append(f"… {len(listed) - MAX_ITEMS} more")
        return kept
    return _text(repr(value), secrets)


def _text(text: str, secrets: Sequence[str], limit: int = MAX_TEXT) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASKED)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(text: str, secrets: Sequence[str]) -> str:
    return _text(text, secrets, MAX_FIELD)
