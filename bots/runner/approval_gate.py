"""A run's approval gate, as the runner wires it.

Owns: `approval_gate`, the hook a run's loop asks before a batch's calls run: built from the
channel's approval settings and the run (who asked, where it is shown), or None when none of
the run's tools needs approval, so a run without approvals pays nothing
(docs/architecture.md, "Approvals").

Must not: decide anything (bots.features.approvals does), render, or write SQL.
"""

from __future__ import annotations

from collections.abc import Sequence

from bots.features.approvals import GateRun
from bots.inbox import RunState
from bots.runner.shared import Shared
from bots.settings import ChannelConfig
from core.loop import ToolGate
from core.messages import Author
from core.tools import AnyTool
from storage.base import Conversation

__all__ = ["approval_gate"]


def approval_gate(
    shared: Shared,
    conversation: Conversation,
    run: RunState,
    author: Author | None,
    tools: Sequence[AnyTool],
    stored: ChannelConfig | None = None,
) -> ToolGate | None:
    """`stored`: what the channel's admins set (`/teammate config approvals`), over the file."""
    policy = shared.settings.approvals_for(conversation.channel_key)
    if stored is not None and stored.approvals is not None:
        policy = stored.approvals
    if not policy.tools or run.id is None:
        return None
    facts = GateRun(
        conversation_id=conversation.id,
        conversation_key=conversation.key,
        channel_key=conversation.channel_key,
        run_id=run.id,
        asker=author,
        policy=policy,
        show=run.feed.put,
        workspace=shared.workspaces.path(conversation.channel_key),
    )
    return shared.approvals.gate(facts, [tool.name for tool in tools])
