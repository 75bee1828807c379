"""Which conversations Teammate is part of, remembered: is a reply in a thread (or to an
answer) one of ours, without a store read for every message in every thread.

Owns: `KnownConversations`, a bounded memory (the `limit` most recently used) of conversation
keys the store has, filled by asking the store (`runner.conversations.known`) and by the
adapter when it starts one (`remember`). With `remember_unknown`, keys the store did not
know are remembered too (bounded), so a busy thread that is not ours costs one read, not one
per message; only for a platform where nothing but this process can start a conversation in
that thread (Discord: a guild's events reach one shard), since another instance's start would
not reach this memory. Forgetting a key costs a read again, never a wrong answer.

Must not: decide whether a message is addressed to Teammate (the translators do), or touch
the store but through the `ask` it is given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable

__all__ = ["MAX_KNOWN", "KnownConversations"]

MAX_KNOWN = 10_000  # conversation keys remembered, each way


class KnownConversations:
    """`key in known` answers from memory alone; `await known.ask(key)` asks the store when
    memory cannot say."""

    def __init__(
        self,
        ask: Callable[[str], Awaitable[bool]],
        *,
        remember_unknown: bool = False,
        limit: int = MAX_KNOWN,
    ) -> None:
        self._ask = ask
        self._remember_unknown = remember_unknown
        self._limit = limit
        self._known: OrderedDict[str, None] = OrderedDict()
        self._unknown: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._known

    async def ask(self, key: str) -> bool:
        """Whether the store has `key`; from memory when it can say."""
        if key in self._known:
            self._known.move_to_end(key)
            return True
        if key in self._unknown:
            return False
        if await self._ask(key):
            self.remember(key)
            return True
        if self._remember_unknown:
            _bounded_add(self._unknown, key, self._limit)
        return False

    def remember(self, key: str) -> None:
        """Teammate is part of `key` now (it answered or started it there)."""
        self._unknown.pop(key, None)
        _bounded_add(self._known, key, self._limit)


def _bounded_add(keys: OrderedDict[str, None], key: str, limit: int) -> None:
    keys[key] = None
    keys.move_to_end(key)
    while len(keys) > limit:
        keys.popitem(last=False)
