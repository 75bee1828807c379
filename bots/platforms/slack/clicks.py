"""The Stop, 👍/👎 and approval buttons on Slack, and Slack's own stop on an agent session.

Owns: reading a block-actions payload (`parse_click`) and an `agent_session_stopped` envelope
(`parse_native_stop`), and `SlackClicks`, which turns them into the shared checks of
`bots.features.clicks` after Slack's own: the button's value, the thread it sits in (a Stop button
can only stop a run of the thread it was clicked in), people of another organisation (a Slack
Connect channel: `[slack] external_teams`, as for their messages), and the allow-lists
(`bots.access`), with a private note for a refusal or a stale Stop. A vote is shown by Slack's
own feedback buttons, so it gets no note. An approval is decided through
`bots.features.approvals_clicks`, the presser an admin by `[slack] admins`.

Must not: stop or count anything but through `bots.features.clicks` and the runner, or write SQL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bots.access import access_refusal
from bots.features.approvals_clicks import ApprovalClick, approval_click
from bots.features.clicks import RunClick, feedback_click, stop_click
from bots.incoming import Incoming
from bots.platforms.slack.approval_blocks import parse_approval
from bots.platforms.slack.blocks import parse_feedback_value, parse_stop_value
from bots.platforms.slack.refusals import external_refusal
from bots.platforms.slack.users import UserNames
from bots.runner import STALE_STOP_TEXT, ConversationRunner
from bots.settings import Settings
from core.messages import Author

__all__ = ["ButtonClick", "SlackClicks", "parse_click", "parse_native_stop"]

log = logging.getLogger(__name__)

_SLACK_ID = re.compile(r"[A-Za-z0-9]{1,64}")  # as bots.platforms.slack.events accepts them in keys
_SLACK_TS = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")

# Posts a private note: (channel id, user id, thread ts, text).
Ephemeral = Callable[[str, str, str | None, str], Awaitable[None]]


@dataclass(slots=True, frozen=True)
class ButtonClick:
    """A Stop or feedback button: who clicked, where, and the value the surface gave it."""

    action_id: str
    value: str
    user_id: str
    channel_id: str
    thread_ts: str | None
    team_id: str
    # The clicker's own organisation as Slack names it (`user.team_id`: a workspace, or in an
    # Enterprise Grid the organisation's id), and the Grid the click came from, if any.
    user_team: str = ""
    enterprise_id: str = ""


class SlackClicks:
    """The work behind a click, after its acknowledgement. `team_id` is the installation's."""

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

    async def handle_stop_click(self, click: ButtonClick) -> None:
        run_id = parse_stop_value(click.value)
        if run_id is None or click.thread_ts is None:
            log.warning("a Stop button with an unreadable value was clicked")
            return
        # The button sits in the answer's thread: that thread is the conversation, so a
        # button can only ever stop a run of the thread it was clicked in. Its team is the
        # installation's (the key's), or the clicker's in a channel shared between workspaces.
        keys = [f"{channel}:{click.thread_ts}" for channel in self._channel_keys(click)]
        key = next((k for k in keys if self._runner.current_run(k) == run_id), keys[0])
        name = await self._names.name(click.user_id)
        refusal = self._refusal(click, _clicker(click, key, name))
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)
            return
        pressed = RunClick(
            run_id,
            Author(id=click.user_id, name=name),
            channel_keys=(key.rsplit(":", 1)[0],),
            conversation_keys=(key,),
        )
        if await stop_click(self._runner, pressed) != "stopped":
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, STALE_STOP_TEXT)

    async def handle_native_stop(self, body: dict[str, Any]) -> None:
        """Slack's own stop button on an agent session (`agent_session_stopped`): stops the
        answer being written in that thread, like our Stop button (what is queued behind it
        is still answered)."""
        stopped = parse_native_stop(body)
        if stopped is None:
            log.warning("an agent_session_stopped event without a readable thread; ignored")
            return
        event_id, team_id, channel_id, thread_ts, user_id = stopped
        if not await self._runner.conversations.claim_delivery(f"slack:event:{event_id}"):
            return  # a retry: the first one stopped it
        key = f"slack:{team_id}:{channel_id}:{thread_ts}"
        run_id = self._runner.current_run(key)
        if run_id is None:
            return
        by = Author(id=user_id, name=await self._names.name(user_id))
        result = self._runner.stop(key, run_id, by=by)
        log.info("Slack's stop for run %s in %s: %s", run_id, key, result)

    async def handle_feedback_click(self, click: ButtonClick) -> None:
        vote = parse_feedback_value(click.value)
        if vote is None:
            log.warning("a feedback button with an unreadable value was clicked")
            return
        run_id, choice = vote
        # Counted only from people allowed here, and only for a run of the channel clicked in
        # (a value naming another channel's run is a forgery): the key's team is the
        # installation's, or the clicker's in a channel shared between workspaces.
        channels = self._channel_keys(click)
        if not click.channel_id or not channels:
            return
        name = await self._names.name(click.user_id)
        clicker = _clicker(click, f"{channels[0]}:{click.thread_ts or ''}", name)
        refusal = self._refusal(click, clicker)
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)
            return
        pressed = RunClick(
            run_id,
            Author(id=click.user_id, name=name),
            channel_keys=tuple(channels),
            conversation_keys=(clicker.conversation_key,),
        )
        await feedback_click(self._runner, pressed, choice)  # shown by Slack's own buttons

    async def handle_approval_click(self, click: ButtonClick) -> None:
        """Approve / Deny / Approve the rest: Slack's checks (value, organisation, allow-lists,
        admin from the click's own `user.id`), then the shared decision; a refusal's note is
        private."""
        parsed = parse_approval(click.value)
        channels = self._channel_keys(click)
        if parsed is None or not click.channel_id or not channels:
            log.warning("an approval button with an unreadable value was clicked")
            return
        choice, approval_id = parsed
        name = await self._names.name(click.user_id)
        clicker = _clicker(click, f"{channels[0]}:{click.thread_ts or ''}", name)
        refusal = self._refusal(click, clicker)
        if refusal is None:
            pressed = ApprovalClick(
                approval_id,
                choice,
                clicker.author,
                is_admin=click.user_id in self._settings.slack.admins,
                channel_keys=tuple(channels),
            )
            refusal = await approval_click(self._runner.approvals, pressed)
        if refusal is not None:
            await self._ephemeral(click.channel_id, click.user_id, click.thread_ts, refusal)

    def _channel_keys(self, click: ButtonClick) -> list[str]:
        """The channel clicked in: the installation's team's key, and the clicker's team's in a
        channel shared between workspaces."""
        teams = dict.fromkeys((self._team_id, click.team_id))
        return [f"slack:{team}:{click.channel_id}" for team in teams if team]

    def _refusal(self, click: ButtonClick, clicker: Incoming) -> str | None:
        """Why the clicker may not act here (another organisation, the allow-lists), or None."""
        return self._external_refusal(click) or access_refusal(self._settings, clicker)

    def _external_refusal(self, click: ButtonClick) -> str | None:
        """A click by a person of another organisation is refused as their messages are. Slack
        names the clicker's organisation in `user.team_id`: our workspace, or (in a Grid) our
        organisation's id, is the team's; anything else is a Slack Connect guest."""
        ours = {self._team_id, click.enterprise_id} - {""}
        external = click.user_team if click.user_team and click.user_team not in ours else None
        return external_refusal(self._settings.slack.external_teams, external)


def parse_click(body: dict[str, Any]) -> ButtonClick | None:
    """The first action of a block-actions payload, or None if its shape is not Slack's."""
    try:
        action = body["actions"][0]
        channel = body.get("channel") or {}
        container = body.get("container") or {}
        message = body.get("message") or {}
        thread_ts = container.get("thread_ts") or message.get("thread_ts") or message.get("ts")
        team = body.get("team") or {}
        enterprise = body.get("enterprise") or {}
        value = action.get("value")
        if value is None:  # feedback buttons carry the chosen button's value
            value = (action.get("selected_option") or {}).get("value")
        return ButtonClick(
            action_id=str(action["action_id"]),
            value=str(value or "")[:200],
            user_id=str(body["user"]["id"]),
            channel_id=str(channel.get("id") or container.get("channel_id") or ""),
            thread_ts=str(thread_ts) if thread_ts else None,
            team_id=str(team.get("id") or body["user"].get("team_id") or ""),
            user_team=str(body["user"].get("team_id") or "")[:64],
            enterprise_id=str(enterprise.get("id") or team.get("enterprise_id") or "")[:64],
        )
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def parse_native_stop(body: dict[str, Any]) -> tuple[str, str, str, str, str] | None:
    """(event id, team, channel, thread_ts, user) of an `agent_session_stopped` envelope."""
    event = body.get("event") if isinstance(body, dict) else None
    if not isinstance(event, dict):
        return None
    fields = (
        body.get("event_id"),
        body.get("team_id") or event.get("team"),
        event.get("channel"),
        event.get("thread_ts"),
        event.get("user"),
    )
    if not all(isinstance(f, str) for f in fields):
        return None
    event_id, team, channel, thread_ts, user = (str(f) for f in fields)
    ids_ok = all(_SLACK_ID.fullmatch(v) for v in (event_id, team, channel, user))
    if not ids_ok or not _SLACK_TS.fullmatch(thread_ts):
        return None
    return event_id, team, channel, thread_ts, user


def _clicker(click: ButtonClick, conversation_key: str, name: str) -> Incoming:
    """The click as the allow-lists see it."""
    channel_key = conversation_key.rsplit(":", 1)[0]
    return Incoming(
        conversation_key=conversation_key,
        channel_key=channel_key,
        author=Author(id=click.user_id, name=name),
        text="",
        delivery_id="",
        timestamp=0.0,
    )
