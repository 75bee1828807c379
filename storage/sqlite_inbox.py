"""The SQL of deliveries and the inbox, on SQLite.

Owns: the calls behind `claim_delivery`, `prune_deliveries`, `accept_delivery` (ONE
`INSERT INTO teammate_accept ... RETURNING` per call or per batch: `sqlite_triggers`),
`deliver` (an inbox item marked delivered enters history in the same statement) and `drop`, as
`Op`s the store's batcher runs; the reads behind `pending` and `pending_conversations`; and
delivering items in their turn, which starting a run shares (`sqlite_runs`).

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.messages import Message, load_message
from storage import rows
from storage.batching import Op
from storage.records import Accepted, InboxItem, StoredMessage
from storage.sqlite_ops import Db, fetchall, fetchone, json_list, one_of, together


async def _claim_lone(db: Db, call: tuple[str, float]) -> bool:
    found = await fetchall(
        db,
        "INSERT INTO deliveries (id, claimed_at) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING 1",
        call,
    )
    return bool(found)


async def _claim_many(db: Db, calls: list[tuple[str, float]]) -> list[bool]:
    claimed = {
        str(row[0])
        for row in await fetchall(
            db,
            "INSERT INTO deliveries (id, claimed_at) SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]') FROM json_each(?) WHERE true ON CONFLICT DO NOTHING "
            "RETURNING id",
            (json_list(calls),),
        )
    }
    outcomes = []
    for delivery_id, _now in calls:  # an id claimed twice in one batch: the first call wins
        outcomes.append(delivery_id in claimed)
        claimed.discard(delivery_id)
    return outcomes


CLAIM: Op[Db, tuple[str, float], bool] = Op(
    "claim_delivery", one=_claim_lone, lone=_claim_lone, many=_claim_many
)


async def _prune(db: Db, cutoff: float) -> int:
    cursor = await db.execute("DELETE FROM deliveries WHERE claimed_at < ?", (cutoff,))
    return cursor.rowcount


PRUNE: Op[Db, float, int] = Op("prune_deliveries", one=_prune, lone=_prune)


@dataclass(frozen=True, slots=True)
class AcceptCall:
    request: int  # unique per store: finds this call's outcome
    key: str
    channel_key: str
    title: str | None
    claims: list[str]
    delivery_id: str | None
    message: Message
    body_json: str
    ref_json: str
    backfill: list[tuple[Message, str]]
    now: float


_ACCEPT_OUTCOME = (
    "RETURNING request, (SELECT json_array(a.created, a.item_id, c.id, c.key, c.channel_key, "
    "c.title, c.settings, c.created_at, c.updated_at) FROM teammate_accepted a "
    "JOIN conversations c ON c.id = a.conversation_id WHERE a.request = teammate_accept.request)"
)
_ACCEPT_ONE = f"INSERT INTO teammate_accept VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {_ACCEPT_OUTCOME}"
_ACCEPT_ROWS = (
    "INSERT INTO teammate_accept SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
    "json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), "
    "json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]'), "
    f"json_extract(value, '$[8]'), json_extract(value, '$[9]') FROM json_each(?) ORDER BY key "
    f"{_ACCEPT_OUTCOME}"
)


def _accept_row(call: AcceptCall) -> list[Any]:
    return [
        call.request,
        call.key,
        call.channel_key,
        call.title,
        json_list(call.claims),
        call.delivery_id,
        call.body_json,
        call.ref_json,
        call.now,
        json_list(json for _message, json in call.backfill),
    ]


async def _accept_lone(db: Db, call: AcceptCall) -> Accepted | None:
    return _accepted([call], await fetchall(db, _ACCEPT_ONE, _accept_row(call)))[0]


async def _accept_many(db: Db, calls: list[AcceptCall]) -> list[Accepted | None]:
    found = await fetchall(db, _ACCEPT_ROWS, (json_list(_accept_row(c) for c in calls),))
    return _accepted(calls, found)


def _accepted(calls: list[AcceptCall], found: list[Any]) -> list[Accepted | None]:
    """Each call's outcome from the rows returned (a repeat returned none)."""
    outcomes = {int(row[0]): json.loads(row[1]) for row in found}
    results: list[Accepted | None] = []
    for call in calls:
        fields = outcomes.get(call.request)
        if fields is None:
            results.append(None)
            continue
        conversation = rows.conversation_from(fields[2:])
        item = InboxItem(
            id=int(fields[1]),
            conversation_id=conversation.id,
            message=call.message,
            surface_ref=json.loads(call.ref_json),
            received_at=call.now,
        )
        results.append(Accepted(conversation=conversation, item=item, created=bool(fields[0])))
    return results


ACCEPT: Op[Db, AcceptCall, Accepted | None] = Op(
    "accept_delivery", one=one_of(_accept_many), lone=_accept_lone, many=_accept_many
)


@dataclass(frozen=True, slots=True)
class Delivery:
    conversation_id: int
    item_ids: list[int]
    known: dict[int, Message]  # messages this store still holds: not parsed again


# Deliver one item in its turn: the next seq, taken when it runs; only if still pending; only
# if every item of its call is that conversation's (else the call writes nothing at all).
DELIVER_ITEM = (
    "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, run_id = ?, "
    "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
    "WHERE id = ? AND conversation_id = ? AND state = 'pending' AND (SELECT COUNT(*) FROM inbox "
    "WHERE id IN (SELECT value FROM json_each(?)) AND conversation_id = ?) = ?"
)
_INBOX_STATE = (
    "SELECT id, conversation_id, state, body, seq FROM inbox "
    "WHERE id IN (SELECT value FROM json_each(?))"
)


def delivery_rows(delivery: Delivery, run_id: int | None, now: float) -> list[tuple[Any, ...]]:
    cid, ids = delivery.conversation_id, delivery.item_ids
    everyone = (json_list(ids), cid, len(set(ids)))
    return [(now, run_id, item_id, cid, *everyone) for item_id in ids]


async def inbox_state(db: Db, item_ids: set[int]) -> dict[int, tuple[int, str, str | None, Any]]:
    found = await fetchall(db, _INBOX_STATE, (json_list(item_ids),)) if item_ids else []
    return {int(row[0]): (int(row[1]), str(row[2]), row[3], row[4]) for row in found}


def refusal(
    delivery: Delivery, before: dict[int, tuple[int, str, str | None, Any]]
) -> KeyError | None:
    """Why a delivery writes nothing: an item that is not its conversation's."""
    cid = delivery.conversation_id
    foreign = [i for i in delivery.item_ids if i not in before or before[i][0] != cid]
    return KeyError(f"no inbox item {foreign[0]} in conversation {cid}") if foreign else None


def _delivered(
    deliveries: list[Delivery],
    before: dict[int, tuple[int, str, str | None, Any]],
    after: dict[int, tuple[int, str, str | None, Any]],
) -> list[list[StoredMessage] | KeyError]:
    """What each delivery did, from its items before and after: the items pending before,
    in its order (an item in two deliveries went to the first), or a KeyError."""
    outcomes: list[list[StoredMessage] | KeyError] = []
    taken: set[int] = set()
    for delivery in deliveries:
        refused = refusal(delivery, before)
        if refused is not None:
            outcomes.append(refused)
            continue
        stored: list[StoredMessage] = []
        for item_id in delivery.item_ids:
            _conversation, state, body_json, _seq = before[item_id]
            if state != "pending" or item_id in taken:  # settled before, or given twice
                continue
            taken.add(item_id)
            assert body_json is not None  # a pending item keeps its body
            message = delivery.known.get(item_id)
            if message is None:
                message = load_message(body_json)
            stored.append(StoredMessage(seq=int(after[item_id][3]), message=message))
        outcomes.append(stored)
    return outcomes


@dataclass(frozen=True, slots=True)
class DeliverCall:
    delivery: Delivery
    run_id: int | None
    now: float


async def _deliver_many(db: Db, calls: list[DeliverCall]) -> list[list[StoredMessage] | Exception]:
    # One round trip: the items before, every item delivered in its turn, the items after.
    wanted = {item for c in calls for item in c.delivery.item_ids}
    rows_ = [row for c in calls for row in delivery_rows(c.delivery, c.run_id, c.now)]
    before, _updated, after = await together(
        inbox_state(db, wanted), db.executemany(DELIVER_ITEM, rows_), inbox_state(db, wanted)
    )
    return list(_delivered([c.delivery for c in calls], before, after))


async def _deliver_lone(db: Db, call: DeliverCall) -> list[StoredMessage]:
    """One item whose message this store holds: ONE statement (the trigger appends it)."""
    [(item_id, message)] = call.delivery.known.items()
    cid = call.delivery.conversation_id
    found = await fetchone(
        db,
        "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = ?, run_id = ?, "
        "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
        "WHERE id = ? AND conversation_id = ? AND state = 'pending' RETURNING seq",
        (call.now, call.run_id, item_id, cid),
    )
    if found is not None:
        return [StoredMessage(seq=int(found[0]), message=message)]
    # Settled before (nothing to do), or not this conversation's.
    if await fetchone(
        db, "SELECT 1 FROM inbox WHERE id = ? AND conversation_id = ?", (item_id, cid)
    ):
        return []
    raise KeyError(f"no inbox item {item_id} in conversation {cid}")


DELIVER: Op[Db, DeliverCall, list[StoredMessage]] = Op(
    "deliver", one=one_of(_deliver_many), many=_deliver_many
)
DELIVER_KNOWN_ONE: Op[Db, DeliverCall, list[StoredMessage]] = Op(
    "deliver one", one=one_of(_deliver_many), lone=_deliver_lone, many=_deliver_many
)


async def _drop(db: Db, call: tuple[int, list[int], str, float]) -> None:
    conversation_id, item_ids, reason, now = call
    found = {
        int(row[0])
        for row in await fetchall(
            db,
            "SELECT id FROM inbox WHERE conversation_id = ? "
            "AND id IN (SELECT value FROM json_each(?))",
            (conversation_id, json_list(item_ids)),
        )
    }
    for item_id in item_ids:
        if item_id not in found:
            raise KeyError(f"no inbox item {item_id} in conversation {conversation_id}")
    await db.execute(
        "UPDATE inbox SET state = 'dropped', settled_at = ?, reason = ? "
        "WHERE id IN (SELECT value FROM json_each(?)) AND state = 'pending'",
        (now, reason, json_list(item_ids)),
    )


DROP: Op[Db, tuple[int, list[int], str, float], None] = Op("drop", one=_drop)


async def read_pending(db: Db, conversation_id: int) -> list[InboxItem]:
    """Inbox items neither delivered nor dropped, in arrival order."""
    found = await fetchall(
        db,
        "SELECT i.id, i.body, i.surface_ref, i.received_at FROM conversations c "
        "LEFT JOIN inbox i ON i.conversation_id = c.id AND i.state = 'pending' "
        "WHERE c.id = ? ORDER BY i.id",
        (conversation_id,),
    )
    if not found:
        raise KeyError(f"no conversation with id {conversation_id}")
    return [rows.inbox_item(conversation_id, row) for row in found if row[0] is not None]


async def read_pending_conversations(db: Db) -> list[int]:
    """Conversations with pending inbox items, the one waiting longest first."""
    found = await fetchall(
        db,
        "SELECT conversation_id FROM inbox WHERE state = 'pending' "
        "GROUP BY conversation_id ORDER BY MIN(id)",
    )
    return [int(row[0]) for row in found]
