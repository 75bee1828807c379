"""Persisted conversations: the `ConversationStore` contract and its SQLite backend.

Callers depend on `ConversationStore` and the records in `storage.base`; only the entry point
chooses a backend (`SqliteStore.open(path)`).
"""

from storage.base import (
    Accepted,
    Compaction,
    Conversation,
    ConversationStore,
    DatabaseDamaged,
    FeedbackTally,
    InboxItem,
    LoadedConversation,
    RunOutcome,
    RunRecord,
    SchemaError,
    StoredMessage,
    UsageSummary,
    Vote,
)
from storage.sqlite import SqliteStore

__all__ = [
    "Accepted",
    "Compaction",
    "Conversation",
    "ConversationStore",
    "DatabaseDamaged",
    "FeedbackTally",
    "InboxItem",
    "LoadedConversation",
    "RunOutcome",
    "RunRecord",
    "SchemaError",
    "SqliteStore",
    "StoredMessage",
    "UsageSummary",
    "Vote",
]
