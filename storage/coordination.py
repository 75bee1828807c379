"""Several instances on one database: the coordination a store offers, and what it tells.

Owns: `InstanceCoordination` (a lease per conversation, its fencing token and its own-clock
freshness, notifications between instances), `SingleProcess` (a store one process owns:
every lease granted, nothing to fence, nobody to notify), `coordination_of`, and the
notifications (`NewInboxItem`, `StopRequest`, `LeaseLost`, `Resync`). `storage.base`
re-exports every name; docs/architecture.md, "Several instances", tells how they are used.

Must not: import `tools` or `bots`; know a backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from storage.records import Fence


@dataclass(slots=True, frozen=True)
class NewInboxItem:
    """Another instance accepted a message into a conversation's inbox (it is committed)."""

    conversation_id: int
    conversation_key: str
    item_id: int


@dataclass(slots=True, frozen=True)
class StopRequest:
    """Someone asked another instance to stop this conversation's run (`run_id`: that run
    only; None: the run and everything queued behind it)."""

    conversation_key: str
    run_id: int | None
    by_id: str | None
    by_name: str | None


@dataclass(slots=True, frozen=True)
class LeaseLost:
    """This instance no longer holds the conversation's lease (it stalled past the lease's
    expiry and another instance may have taken over): stop running it."""

    conversation_id: int


@dataclass(slots=True, frozen=True)
class Resync:
    """Notifications may have been missed (the listening connection was re-made): re-read
    the inbox of every conversation this instance runs."""


Notification: TypeAlias = NewInboxItem | StopRequest | LeaseLost | Resync


@runtime_checkable
class InstanceCoordination(Protocol):
    """What a store shared by several instances offers so that each conversation runs in one
    place: a lease per conversation, and notifications between instances."""

    @property
    def shared(self) -> bool:
        """True if other instances may run this database's conversations."""
        ...

    async def acquire_lease(self, conversation_id: int) -> bool:
        """Hold (or renew) the conversation's lease; False if another live instance does."""
        ...

    def took_over(self, conversation_id: int) -> bool:
        """True if the held lease was taken from another holder whose lease had expired: that
        instance died (or stalled) and its runs in the conversation may still be open."""
        ...

    def fence(self, conversation_id: int) -> Fence | None:
        """The held lease as a token for the writes of its runs (None: not held, or a store
        without leases)."""
        ...

    def fresh(self, fence: Fence) -> bool:
        """Whether the lease `fence` names may still be this instance's by its own clock:
        held at that epoch, and renewed less than a lease's life ago (a monotonic clock, so a
        pause counts). False once it may have expired, or was reported lost."""
        ...

    def let_lapse(self, conversation_id: int) -> None:
        """Stop renewing the lease without handing it back: it expires, and whoever takes it
        next (this instance too) closes the runs left open there first."""
        ...

    async def release_lease(self, conversation_id: int) -> None: ...

    async def publish_stop(
        self,
        conversation_key: str,
        run_id: int | None,
        *,
        by_id: str | None = None,
        by_name: str | None = None,
    ) -> None:
        """Ask whichever instance runs the conversation to stop it."""
        ...

    def notifications(self) -> AsyncIterator[Notification]:
        """What other instances did that concerns this one, until the store closes."""
        ...


class SingleProcess:
    """The coordination of a store only one process runs conversations from (SQLite): every
    lease is granted, and there is nobody to notify."""

    shared = False

    async def acquire_lease(self, conversation_id: int) -> bool:
        return True

    def took_over(self, conversation_id: int) -> bool:
        return False  # (one process: `recover()` at start-up closes what a crash left open)

    def fence(self, conversation_id: int) -> Fence | None:
        return None  # nobody else writes: nothing to fence out

    def fresh(self, fence: Fence) -> bool:
        return True

    def let_lapse(self, conversation_id: int) -> None:
        return None

    async def release_lease(self, conversation_id: int) -> None:
        return None

    async def publish_stop(
        self,
        conversation_key: str,
        run_id: int | None,
        *,
        by_id: str | None = None,
        by_name: str | None = None,
    ) -> None:
        return None

    async def notifications(self) -> AsyncIterator[Notification]:
        return
        yield  # an async generator that ends at once


def coordination_of(store: object) -> InstanceCoordination:
    """The store's own coordination if it has one, else `SingleProcess`."""
    return store if isinstance(store, InstanceCoordination) else SingleProcess()
