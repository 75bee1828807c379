"""Approval buttons on Slack: the checks Slack's clicks need, then the shared decision.

Owns: `SlackApprovalClicks.handle`: a button's value read (`approval_blocks.parse_approval`),
people of another organisation refused like on Stop (`[slack] external_teams`), the
allow-lists, whether the presser is an admin (`[slack] admins`, from the click's own
`user.id`), the channels the click came from (the installation's team, or the presser's in a
channel shared between workspaces), and a private note for a refusal.

Must not: decide anything but through `bots.features.approvals_clicks`, or write SQL.
"""

from __future__ import annotations

import logging

from bots.access import access_refusal
from bots.features.approvals_clicks import ApprovalClick, approval_click
from bots.incoming import Incoming
from bots.platforms.slack.approval_blocks import parse_approval
from bots.platforms.slack.clicks import ButtonClick, Ephemeral
from bots.platforms.slack.refusals import external_refusal
from bots.platforms.slack.users import UserNames
from bots.runner import ConversationRunner
from bots.settings import Settings
from core.messages import Author

__all__ = ["SlackApprovalClicks"]

log = logging.getLogger(__name__)


class SlackApprovalClicks:
    def __init__(
        self,
        *,
        runner: ConversationRunner,
        settings: Settings,
        team_id: str,
        names: UserNames,
        ephemeral: Ephemeral,
    ) -> None:
        self._runner = runner
        self._settings = settings
        self._team_id = team_id
        self._names = names
        self._ephemeral = ephemeral

    async def handle(self, click: ButtonClick) -> None:
        parsed = parse_approval(click.value)
        if parsed is None or not click.channel_id:
            log.warning("an approval button with an unreadable value was clicked")
            return
        choice, approval_id = parsed
        channels = tuple(
            f"slack:{team}:{click.channel_id}"
            for team in dict.fromkeys((self._team_id, click.team_id))
            if team
        )
        name = await self._names.name(click.user_id)
        by = Author(id=click.user_id, name=name)
        refusal = self._external_refusal(click) or access_refusal(
            self._settings,
            Incoming(
                conversation_key=f"{channels[0]}:{click.thread_ts or ''}",
                channel_key=channels[0],
                author=by,
                text="",
                delivery_id="",
                timestamp=0.0,
            ),
        )
        if refusal is None:
            pressed = ApprovalClick(
                approval_id,
                choice,
                by,
                is_admin=click.user_id in self._settings.slack.admins,
                channel_keys=channels,
            )
            refusal = await approval_click(self._runner.approvals, pressed)
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)

    def _external_refusal(self, click: ButtonClick) -> str | None:
        ours = {self._team_id, click.enterprise_id} - {""}
        external = click.user_team if click.user_team and click.user_team not in ours else None
        return external_refusal(self._settings.slack.external_teams, external)
