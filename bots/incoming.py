"""`Incoming`: a platform-neutral message, as adapters hand it to the runner.

Owns: `Incoming`, `Attachment` and `BackfillMessage`. Adapters build these from platform
payloads; the runner never sees a platform payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.messages import Author


@dataclass(slots=True, frozen=True)
class Attachment:
    """A file that came with a message, already downloaded by the adapter."""

    name: str
    mime_type: str
    data: bytes


@dataclass(slots=True, frozen=True)
class BackfillMessage:
    """An earlier message of a thread, supplied when the assistant is first mentioned in it.

    `from_assistant` marks Teammate's own earlier replies (e.g. before a restart on a new
    database); they enter the conversation as quoted context, attributed to Teammate.
    """

    author: Author
    text: str
    timestamp: float
    platform_message_id: str | None = None
    from_assistant: bool = False


@dataclass(slots=True, frozen=True)
class Incoming:
    """One message for Teammate.

    `conversation_key` names the thread (`slack:<team>:<channel>:<thread_ts>`,
    `discord:<guild|dm>:<channel_or_thread>`, `terminal:<name>`); `channel_key` names the
    workspace scope (threads of one channel share it); `delivery_id` is the platform's id for
    this delivery, used to answer it once however often it is delivered.
    """

    conversation_key: str
    channel_key: str
    author: Author
    text: str
    delivery_id: str
    timestamp: float
    attachments: tuple[Attachment, ...] = ()
    platform_message_id: str | None = None
    backfill: tuple[BackfillMessage, ...] = field(default=())
    title: str | None = None  # a title for a new conversation (e.g. the channel's name)
    # More ids naming this same delivery, claimed atomically with it (Slack: the event id
    # beside channel+ts); if any was claimed before, the delivery is a repeat.
    also_claim: tuple[str, ...] = ()
