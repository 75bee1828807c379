"""Daily spend limits per conversation, channel and person.

Owns: `budget_refusal`, which reads the usage ledger and names the limit that was reached.
Days are UTC days.
"""

from __future__ import annotations

from datetime import UTC, datetime

from bots.settings import BudgetSettings
from core.messages import Author, Usage
from storage.base import Conversation, ConversationStore


def utc_day_start(now: float) -> float:
    day = datetime.fromtimestamp(now, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


async def budget_refusal(
    store: ConversationStore,
    budgets: BudgetSettings,
    conversation: Conversation,
    author: Author | None,
    now: float,
) -> str | None:
    """Why a run may not start (a daily limit reached), or None."""
    day_start = utc_day_start(now)
    checks: list[tuple[float, str, str, Usage]] = []
    if budgets.conversation_usd_per_day is not None:
        spent = await store.usage_since(day_start, conversation_id=conversation.id)
        checks.append(
            (budgets.conversation_usd_per_day, "this conversation", "conversation", spent)
        )
    if budgets.channel_usd_per_day is not None:
        spent = await store.usage_since(day_start, channel_key=conversation.channel_key)
        checks.append((budgets.channel_usd_per_day, "this channel", "channel", spent))
    if budgets.user_usd_per_day is not None and author is not None:
        spent = await store.usage_since(day_start, user_id=author.id)
        checks.append((budgets.user_usd_per_day, author.name, "user", spent))
    for limit, who, name, spent in checks:
        if spent.cost >= limit:
            return (
                f"Daily budget reached: {who} has used ${spent.cost:.2f} of "
                f"${limit:.2f} today (limit `budgets.{name}_usd_per_day`). "
                "It resets at midnight UTC."
            )
    return None
