"""A writer for the crash-safety test: appends a deterministic sequence of messages forever.

Run as `python -m tests.storage.crash_writer DB_PATH` (or with `inbox` after the path: accept
deliveries instead, printing each delivery id once accepted). It resumes after the last stored
message, prints `ready`, then for every append prints its seq once `append_message` has
returned (i.e. once it is committed). The test SIGKILLs it at random moments.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

from core.messages import (
    AssistantMessage,
    Author,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from storage.sqlite import SqliteStore

CONVERSATION_KEY = "terminal:crash"


def expected_message(seq: int) -> Message:
    """Message number `seq` of the sequence: the same every time, sized 50 B to ~24 KB."""
    rng = random.Random(seq)
    # Some messages span several pages (overflow pages), so a torn write would show.
    size = rng.choice([50, 300, 900, 4000, 24000])
    filler = rng.randbytes(size // 2).hex()
    match seq % 3:
        case 1:
            return UserMessage(
                content=f"#{seq} {filler}",
                author=Author(id=f"U{seq % 5}", name=f"Person {seq % 5}"),
                platform_message_id=f"{seq}.000100",
                timestamp=float(seq),
            )
        case 2:
            return AssistantMessage(
                content=[
                    Text(text=f"#{seq} reading"),
                    ToolCall(id=f"call_{seq}", name="read", arguments={"path": f"f{seq}.txt"}),
                ],
                model="scripted",
                usage=Usage(input=seq, output=seq % 97, cost=seq / 1e6),
                stop_reason="tool_use",
                timestamp=float(seq),
            )
        case _:
            return ToolResultMessage(
                tool_call_id=f"call_{seq - 1}",
                tool_name="read",
                content=[Text(text=f"#{seq} {filler}")],
                details={"seq": seq},
                timestamp=float(seq),
            )


async def write_forever(path: str) -> None:
    store = await SqliteStore.open(path)
    conversation = await store.get_or_create_conversation(CONVERSATION_KEY, channel_key="t")
    seq = await store.message_count(conversation.id)
    print("ready", flush=True)
    while True:
        seq += 1
        stored = await store.append_message(conversation.id, expected_message(seq))
        assert stored.seq == seq, (stored.seq, seq)
        print(seq, flush=True)


INBOX_KEY = "slack:T:C:crash"
BACKFILL_TEXT = "what the thread said before Teammate was mentioned"


async def accept_forever(path: str) -> None:
    """Accept deliveries as a bot would (and deliver every other batch, as its driver would);
    print each delivery id once `accept_delivery` has returned."""
    store = await SqliteStore.open(path)
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        delivery_id = f"{os.getpid()}:{n}"
        accepted = await store.accept_delivery(
            INBOX_KEY,
            UserMessage(content=f"message {delivery_id} " + "x" * (n % 7 * 500)),
            channel_key="slack:T:C",
            delivery_id=delivery_id,
            backfill=[UserMessage(content=BACKFILL_TEXT)],
        )
        assert accepted is not None
        print(delivery_id, flush=True)
        if n % 2 == 0:
            pending = await store.pending(accepted.conversation.id)
            await store.deliver(accepted.conversation.id, [item.id for item in pending])


if __name__ == "__main__":
    if sys.argv[2:] == ["inbox"]:
        asyncio.run(accept_forever(sys.argv[1]))
    else:
        asyncio.run(write_forever(sys.argv[1]))
