"""A writer for the crash-safety test: appends a deterministic sequence of messages forever.

Run as `python -m tests.storage.crash_writer DB_PATH`. It resumes after the last stored
message, prints `ready`, then for every append prints its seq once `append_message` has
returned (i.e. once it is committed). The test SIGKILLs it at random moments.
"""

from __future__ import annotations

import asyncio
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


if __name__ == "__main__":
    asyncio.run(write_forever(sys.argv[1]))
