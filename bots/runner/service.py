"""What a platform adapter may ask of the conversations' records, through the runner.

Owns: `ConversationService` (`runner.conversations`), the few reads and writes Slack and
Discord make besides submitting and stopping: whether a conversation is known, a channel's
conversations to reset, claiming a delivery that stores no message (a stop, a refusal), a
day's usage, a vote on a run, an entry in the audit log, and each adapter's own channel
configuration and memory helpers. Each is one store call, unchanged; this is the whole of what
adapters reach.

Must not: grow into the store's interface (add a method only when an adapter needs it), or
be used by the runner itself. Adapters must not reach `runner.store`
(tests/bots/test_adapters_reach_no_store.py holds them to it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bots.features.audit import record_action
from bots.features.channel_config import ChannelConfigs
from bots.features.memory import ChannelMemory
from bots.settings import MemorySettings, Settings
from storage.base import ConversationStore, FeedbackTally, UsageSummary, Vote

__all__ = ["ConversationService"]


class ConversationService:
    """The runner-side service adapters use instead of the store."""

    def __init__(self, store: ConversationStore) -> None:
        self._store = store

    async def known(self, conversation_key: str) -> bool:
        """Whether Teammate has a conversation with this key (it took part in the thread)."""
        return await self._store.get_conversation(conversation_key) is not None

    async def channel_of(self, conversation_key: str) -> str | None:
        """The channel key of a known conversation, or None."""
        conversation = await self._store.get_conversation(conversation_key)
        return conversation.channel_key if conversation is not None else None

    async def keys_in_channel(self, channel_key: str, *, limit: int) -> list[str]:
        """The channel's conversations, the most recently created first, at most `limit`."""
        conversations = await self._store.channel_conversations(channel_key, limit=limit)
        return [conversation.key for conversation in conversations]

    async def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time `delivery_id` is claimed, False for every repeat (for events
        that store no message, such as a stop)."""
        return await self._store.claim_delivery(delivery_id)

    async def usage_summary(self, since: float, *, channel_key: str) -> UsageSummary:
        """A channel's runs, usage and votes since `since`."""
        return await self._store.usage_summary(since, channel_key=channel_key)

    async def set_feedback(
        self,
        run_id: int,
        user_id: str,
        vote: Vote | None,
        *,
        channel_keys: Sequence[str] | None = None,
    ) -> FeedbackTally:
        """Record a person's vote on a run of one of `channel_keys` (the channel the button
        was clicked in; None: any), replacing their earlier one. Unknown run, or a run of
        another channel: `KeyError`; a vote other than "up", "down" or None: `ValueError`."""
        if channel_keys is None:
            return await self._store.set_run_feedback(run_id, user_id, vote)
        for channel_key in channel_keys:
            try:
                return await self._store.set_run_feedback(
                    run_id, user_id, vote, channel_key=channel_key
                )
            except KeyError:
                continue
        raise KeyError(f"no run {run_id} in {', '.join(channel_keys) or 'no channel'}")

    async def record_action(
        self,
        *,
        actor: str,
        action: str,
        target: str,
        origin: str,
        detail: Mapping[str, Any] | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        """Write a person's action to the audit log (`bots.features.audit.record_action`)."""
        await record_action(
            self._store,
            actor=actor,
            action=action,
            target=target,
            origin=origin,
            detail=detail,
            secrets=secrets,
        )

    def channel_configs(self, settings: Settings) -> ChannelConfigs:
        """A channel configuration editor for one adapter (one change at a time)."""
        return ChannelConfigs(self._store, settings)

    def channel_memory(
        self, settings: MemorySettings, secrets: Sequence[str] = ()
    ) -> ChannelMemory:
        """The channels' memory as one adapter's commands change it."""
        return ChannelMemory(self._store, settings, secrets)
