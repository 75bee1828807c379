"""The Stop and 👍/👎 buttons on an answer, pressed on any platform: the checks written once.

Owns: `RunClick` (a press, as a platform's payload says it: which run, who, the channel it
was pressed in, the conversation it was pressed in, and the one the button itself names),
`stop_click` and `feedback_click`, and their texts. The checks: a button acts only on a run of
the channel it was pressed in (a value naming another channel's run is forged: it stops
nothing and counts no vote); Stop stops that run only while it is the conversation's current
one (else it is stale); a vote is one per person and run, a new one replacing it (the store
keeps it with the run; `/usage` counts it).

Must not: check a platform's access lists (the adapter refuses first, with its own words),
parse payloads, or answer the press (the adapter shows the result, or not, its own way).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bots.features.audit import actor_of, origin_of
from bots.runner import STALE_STOP_TEXT, ConversationRunner
from core.messages import Author

__all__ = [
    "FEEDBACK_TEXT",
    "STALE_STOP_TEXT",
    "UNKNOWN_RUN_TEXT",
    "RunClick",
    "feedback_click",
    "stop_click",
]

log = logging.getLogger(__name__)

FEEDBACK_TEXT = "Thanks for the feedback."
UNKNOWN_RUN_TEXT = "I no longer know that answer, so the vote was not kept."


@dataclass(slots=True, frozen=True)
class RunClick:
    """A press on a button of run `run_id`.

    `channel_keys` and `conversation_keys` say where it was pressed (more than one spelling
    on a Slack channel shared between workspaces), so they are trusted; `named_conversation`
    is the conversation the button's own value names (Discord's Stop: its thread), trusted
    only once the store says it is of the channel pressed in."""

    run_id: int
    by: Author
    channel_keys: tuple[str, ...]
    conversation_keys: tuple[str, ...]
    named_conversation: str | None = None


async def stop_click(runner: ConversationRunner, click: RunClick) -> Literal["stopped", "stale"]:
    """Stop the run if it is still its conversation's current one."""
    candidates = click.conversation_keys
    named = click.named_conversation
    if named is not None and named not in candidates:
        if await runner.conversations.channel_of(named) not in click.channel_keys:
            log.warning("a Stop button naming another channel's conversation was pressed")
            return "stale"
        candidates = (named,)
    if not candidates:
        return "stale"
    key = next((k for k in candidates if runner.current_run(k) == click.run_id), candidates[0])
    result = runner.stop(key, click.run_id, by=click.by)
    log.info("Stop button for run %s in %s: %s", click.run_id, key, result)
    if result == "stopped":
        channel_key = click.channel_keys[0] if click.channel_keys else key
        await runner.conversations.record_action(
            actor=actor_of(channel_key, click.by),
            action="run.stop",
            target=key,
            origin=origin_of(channel_key),
            detail={"run_id": click.run_id, "by_name": click.by.name, "button": True},
        )
    return "stopped" if result == "stopped" else "stale"


async def feedback_click(
    runner: ConversationRunner, click: RunClick, vote: Literal["up", "down"]
) -> Literal["kept", "unknown"]:
    """Keep the person's vote on a run of the channel pressed in (replacing their earlier
    one); "unknown" for a run the store does not have there."""
    try:
        await runner.conversations.set_feedback(
            click.run_id, click.by.id, vote, channel_keys=list(click.channel_keys)
        )
    except (KeyError, ValueError):
        log.warning("feedback for run %s, unknown in %s, ignored", click.run_id, click.channel_keys)
        return "unknown"
    log.info("feedback %s on run %s by %s", vote, click.run_id, click.by.id)
    return "kept"
