"""Notices and files in a Slack thread, beside an answer.

Owns: `NoticePoster`: a notice as an ephemeral message to its audience (addressed in the
thread where Slack refuses that) or as a small line in the thread; a steered message's
acknowledgements as reactions; a file the assistant produced, uploaded into the thread (a
line saying so when it cannot be). It remembers which notices it showed, so that the end of
the run does not say the same again.

Must not: post anything of the answer itself.
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackApiError

from bots.platforms.slack import blocks
from bots.platforms.slack.surface_calls import (
    MAX_RATE_LIMIT_RETRIES,
    TRANSPORT_ERRORS,
    ThreadCalls,
    error_code,
    is_rate_limited,
    retry_after,
)
from bots.platforms.slack.surface_status import Reactions
from bots.surface.base import NOTICE_MARK
from bots.surface.contract import FileOut, Notice
from core.messages import Author

log = logging.getLogger(__name__)


class NoticePoster:
    def __init__(self, calls: ThreadCalls, reactions: Reactions) -> None:
        self._calls = calls
        self._reactions = reactions
        self.shown: set[str] = set()  # the texts of the notices shown, stripped

    async def show(self, notice: Notice) -> None:
        if notice.ack is not None and self._reactions.enabled:
            # A steered message: 👀 while queued, ✅ once read; no private note for each.
            await self._reactions.acknowledge(notice.ack)
            return
        self.shown.add(notice.text.strip())
        # mrkdwn, escaped: a quoted message cannot mention anyone or @channel.
        line = f"{NOTICE_MARK[notice.level]} {blocks.escape(notice.text)}"
        if notice.audience is not None:
            user = user_id_of(notice.audience)
            try:
                await self._calls.call(
                    self._calls.client.chat_postEphemeral,
                    channel=self._calls.channel,
                    user=user,
                    thread_ts=self._calls.thread_ts,
                    text=blocks.truncate(line, blocks.TEXT_LIMIT),
                )
                return
            except (SlackApiError, *TRANSPORT_ERRORS) as error:
                if not isinstance(error, SlackApiError):
                    return  # it may have been shown; a private note is not worth a repeat
                log.info(
                    "ephemeral notice refused (%s); addressing it in the thread",
                    error_code(error),
                )
                line = f"<@{blocks.escape(user)}> {line}"
        body = blocks.MessageBody(
            blocks.truncate(line, blocks.TEXT_LIMIT), [blocks.context_mrkdwn(line)]
        )
        with contextlib.suppress(SlackApiError, *TRANSPORT_ERRORS):
            await self._calls.post(body, part="notice")

    async def attach(self, file: FileOut) -> None:
        attempts = 0
        while True:
            try:
                await self._calls.client.files_upload_v2(
                    channel=self._calls.channel,
                    thread_ts=self._calls.thread_ts,
                    filename=file.name,
                    content=file.data,
                    title=file.name,
                )
                return
            except SlackApiError as error:
                if is_rate_limited(error) and attempts < MAX_RATE_LIMIT_RETRIES:
                    attempts += 1
                    await self._calls.sleep(retry_after(error))
                    continue
                log.warning("could not upload %s (%s)", file.name, error_code(error))
            except TRANSPORT_ERRORS:
                log.warning("uploading %s failed in transport; not retried", file.name)
            break
        failed = f"{NOTICE_MARK['warning']} I could not attach {file.name}."
        with contextlib.suppress(SlackApiError, *TRANSPORT_ERRORS):
            await self._calls.post(
                blocks.MessageBody(failed, [blocks.context_block(failed)]), part="notice"
            )


def user_id_of(author: Author) -> str:
    """Slack's user id of an author (`U…`; a prefixed id keeps only its last part)."""
    return author.id.rsplit(":", 1)[-1]
