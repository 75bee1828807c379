"""Approval requests: stored once per call, decided once (even by two stores racing), kept
across a restart, bounded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage.base import ConversationStore
from tests.storage.conftest import Backend, FakeClock


async def _request(store: ConversationStore, call_id: str = "call_1", **extra: Any) -> Any:
    conversation = await store.get_or_create_conversation("slack:T:C:1.0", channel_key="slack:T:C")
    run = await store.start_run(conversation.id)
    return await store.add_approval(
        conversation_id=conversation.id,
        conversation_key=conversation.key,
        channel_key=conversation.channel_key,
        run_id=run.id,
        call_id=call_id,
        tool_name="bash",
        request={"label": "rm -rf build", "approvers": ["U1"], **extra},
        now=100.0,
        expires_at=1000.0,
    )


async def test_a_request_is_stored_pending_and_asking_again_keeps_the_first(
    store: ConversationStore,
) -> None:
    first = await _request(store)
    assert first.pending and first.tool_name == "bash" and first.expires_at == 1000.0
    assert first.request == {"label": "rm -rf build", "approvers": ["U1"]}
    again = await store.add_approval(
        conversation_id=first.conversation_id,
        conversation_key=first.conversation_key,
        channel_key=first.channel_key,
        run_id=first.run_id,
        call_id=first.call_id,
        tool_name="bash",
        request={"label": "something else"},
        now=200.0,
        expires_at=2000.0,
    )
    assert again == first
    assert await store.run_approvals(first.run_id) == [first]
    assert await store.pending_approvals(limit=10) == [first]


async def test_exactly_one_decision_counts(store: ConversationStore) -> None:
    request = await _request(store)
    approved = await store.decide_approval(
        request.id, "approved", by="U1", by_name="Ann", now=150.0
    )
    assert approved is not None and approved.state == "approved"
    assert (approved.decided_by, approved.decided_by_name, approved.decided_at) == (
        "U1",
        "Ann",
        150.0,
    )
    assert (
        await store.decide_approval(request.id, "denied", by="U2", by_name="Bob", now=151.0) is None
    )
    assert await store.approval(request.id) == approved
    assert await store.pending_approvals(limit=10) == []
    with pytest.raises(ValueError):
        await store.decide_approval(request.id, "pending", by=None, by_name=None, now=1.0)


async def test_two_stores_racing_on_one_request_decide_it_once(
    backend: Backend, clock: FakeClock
) -> None:
    async with backend.open(clock) as one, backend.open(clock) as two:
        request = await _request(one)
        outcomes = await asyncio.gather(
            *(
                (one if n % 2 else two).decide_approval(
                    request.id, "approved" if n % 2 else "denied", by=f"U{n}", by_name=None, now=1.0
                )
                for n in range(8)
            )
        )
        winners = [o for o in outcomes if o is not None]
        assert len(winners) == 1
        assert await two.approval(request.id) == winners[0]


async def test_a_pending_request_survives_a_restart(backend: Backend, clock: FakeClock) -> None:
    async with backend.open(clock) as store:
        request = await _request(store)
    async with backend.open(clock) as restarted:
        assert await restarted.pending_approvals(limit=10) == [request]


async def test_an_oversized_request_is_refused_and_nothing_is_stored(
    store: ConversationStore,
) -> None:
    with pytest.raises(ValueError):
        await _request(store, preview="x" * 70_000)
    assert await store.pending_approvals(limit=10) == []
