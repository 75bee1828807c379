"""The messages a store accepted and has not yet delivered or dropped, kept in memory.

Owns: `AcceptedMessages`, which both backends' stores keep so that delivering hands back the
very object accepted instead of parsing its stored body again. Bounded; a miss (a restart, an
eviction, another instance accepted it) just parses the stored body.

Must not: run SQL or know a backend; import `tools` or `bots`.
"""

from __future__ import annotations

from core.messages import Message
from storage.records import Accepted

# How many accepted, not yet delivered messages a store keeps in memory.
KEPT = 4096


class AcceptedMessages:
    """Accepted messages by inbox item id, with their conversation; at most `kept`."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._messages: dict[int, tuple[int, Message]] = {}

    def keep(self, accepted: Accepted) -> None:
        """Called once the acceptance committed: its item id is final."""
        if len(self._messages) >= self._kept:
            del self._messages[next(iter(self._messages))]
        self._messages[accepted.item.id] = (accepted.conversation.id, accepted.item.message)

    def known(self, conversation_id: int, item_ids: list[int]) -> dict[int, Message]:
        """The accepted messages still held for `item_ids` of the conversation."""
        return {
            item_id: entry[1]
            for item_id in item_ids
            if (entry := self._messages.get(item_id)) is not None and entry[0] == conversation_id
        }

    def forget(self, item_ids: list[int]) -> None:
        """Settled items (delivered or dropped, now or before) need no kept message."""
        for item_id in item_ids:
            self._messages.pop(item_id, None)
