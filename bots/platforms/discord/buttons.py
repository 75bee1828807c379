"""Teammate's buttons: Stop on a running answer, 👍/👎 on a finished one.

Owns: the persistent buttons as discord.py `DynamicItem`s (their `custom_id` carries the run,
see `bots.platforms.discord.interactions.stop_custom_id`), so a press is understood after a restart
too, and the views a surface attaches. A press is handed to the client's `ButtonHandler`: its cog
named `BUTTONS_COG` (`bots.platforms.discord.buttons_cog`); a client without one answers the press
with a short ephemeral note.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol, runtime_checkable

import discord

from bots.platforms.discord.interactions import (
    approval_custom_id,
    feedback_custom_id,
    parse_custom_id,
    stop_custom_id,
)

Choice = Literal["approve", "deny", "rest"]

UNAVAILABLE_TEXT = "That button isn't available right now."
BUTTONS_COG = "Buttons"  # the cog that handles a press


@runtime_checkable
class ButtonHandler(Protocol):
    async def on_stop_button(
        self, interaction: discord.Interaction[Any], run_id: int, channel_id: str | None
    ) -> None: ...

    async def on_feedback_button(
        self, interaction: discord.Interaction[Any], run_id: int, vote: Literal["up", "down"]
    ) -> None: ...

    async def on_approval_button(
        self, interaction: discord.Interaction[Any], approval_id: int, choice: Choice
    ) -> None: ...


def _handler(client: object) -> ButtonHandler | None:
    get_cog = getattr(client, "get_cog", None)
    cog = get_cog(BUTTONS_COG) if callable(get_cog) else None
    return cog if isinstance(cog, ButtonHandler) else None


async def _unavailable(interaction: discord.Interaction[Any]) -> None:
    await interaction.response.send_message(UNAVAILABLE_TEXT, ephemeral=True)


class StopButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=re.compile(r"stop:(?P<run>[0-9]{1,18})(?::(?P<channel>[0-9]{1,20}))?"),
):
    def __init__(self, run_id: int, channel_id: str | None = None) -> None:
        super().__init__(
            discord.ui.Button(
                label="Stop",
                emoji="⏹️",
                style=discord.ButtonStyle.secondary,
                custom_id=stop_custom_id(run_id, channel_id),
            )
        )
        self.run_id = run_id
        self.channel_id = channel_id

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> StopButton:
        parsed = parse_custom_id(match.group(0))
        assert parsed is not None and parsed[0] == "stop"
        return cls(parsed[1], parsed[2])

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        handler = _handler(interaction.client)
        if handler is not None:
            await handler.on_stop_button(interaction, self.run_id, self.channel_id)
        else:
            await _unavailable(interaction)


class FeedbackButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=re.compile(r"feedback:(?P<run>[0-9]{1,18}):(?P<vote>up|down)"),
):
    def __init__(self, run_id: int, vote: Literal["up", "down"]) -> None:
        super().__init__(
            discord.ui.Button(
                emoji="👍" if vote == "up" else "👎",
                style=discord.ButtonStyle.secondary,
                custom_id=feedback_custom_id(run_id, vote),
            )
        )
        self.run_id = run_id
        self.vote: Literal["up", "down"] = vote

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> FeedbackButton:
        vote: Literal["up", "down"] = "up" if match.group("vote") == "up" else "down"
        return cls(int(match.group("run")), vote)

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        handler = _handler(interaction.client)
        if handler is not None:
            await handler.on_feedback_button(interaction, self.run_id, self.vote)
        else:
            await _unavailable(interaction)


_APPROVAL_LOOKS: dict[Choice, tuple[str, discord.ButtonStyle]] = {
    "approve": ("Approve", discord.ButtonStyle.success),
    "deny": ("Deny", discord.ButtonStyle.danger),
    "rest": ("Approve the rest of this run", discord.ButtonStyle.secondary),
}


class ApprovalButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=re.compile(r"approval:(?P<id>[0-9]{1,18}):(?P<choice>approve|deny|rest)"),
):
    def __init__(self, approval_id: int, choice: Choice, row: int | None = None) -> None:
        label, style = _APPROVAL_LOOKS[choice]
        super().__init__(
            discord.ui.Button(
                label=label,
                style=style,
                custom_id=approval_custom_id(approval_id, choice),
                row=row,
            )
        )
        self.approval_id = approval_id
        self.choice: Choice = choice

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> ApprovalButton:
        parsed = parse_custom_id(match.group(0))
        assert parsed is not None and parsed[0] == "approval"
        choice: Choice = "approve" if parsed[2] == "approve" else "deny"
        return cls(parsed[1], "rest" if parsed[2] == "rest" else choice)

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        handler = _handler(interaction.client)
        if handler is not None:
            await handler.on_approval_button(interaction, self.approval_id, self.choice)
        else:
            await _unavailable(interaction)


def approval_view(approval_ids: list[int]) -> discord.ui.View:
    """A row of Approve / Deny / approve the rest per request (five rows at most)."""
    view = discord.ui.View(timeout=None)
    for row, approval_id in enumerate(approval_ids[:5]):
        choices: tuple[Choice, ...] = ("approve", "deny", "rest")
        for choice in choices:
            view.add_item(ApprovalButton(approval_id, choice, row))
    return view


def stop_view(run_id: int, channel_id: str | None) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(StopButton(run_id, channel_id))
    return view


def feedback_view(run_id: int) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(FeedbackButton(run_id, "up"))
    view.add_item(FeedbackButton(run_id, "down"))
    return view


DYNAMIC_ITEMS: tuple[type[discord.ui.DynamicItem[Any]], ...] = (
    StopButton,
    FeedbackButton,
    ApprovalButton,
)
