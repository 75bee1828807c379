"""The end of a run in Slack: the final answer where the run was shown.

Owns: `FinalAnswer`: the answer's parts (standard Markdown, split at safe boundaries), the
first replacing the stream or the in-progress message and the rest following; how it ended,
usage and 👍/👎 under the last part; the in-progress message left beside a streamed answer
with its tool calls (the Stop button gone) or deleted; and, after a restart, the parts an
earlier process posted edited in place rather than posted twice.

Must not: lose the final answer to a failed update (it is posted instead).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bots.platforms.slack import blocks
from bots.platforms.slack.stream import NativeStream
from bots.platforms.slack.surface_calls import ThreadCalls
from bots.platforms.slack.surface_options import Outbox
from bots.surface.contract import RunOutcome

SPLIT_IN_THREAD_CHARS = 50_000  # longer answers are split off the event loop


class FinalAnswer:
    def __init__(
        self, calls: ThreadCalls, outbox: Outbox, stream: NativeStream, *, recovered: bool
    ) -> None:
        self._calls = calls
        self._outbox = outbox
        self._stream = stream
        self._recovered = recovered  # shown by a process that did not see the run

    async def show(
        self,
        body: str,
        extras: list[dict[str, Any]],
        tools: list[blocks.ToolView],
        outcome: RunOutcome,
    ) -> None:
        attachments = blocks.tool_attachments(tools) if tools else None
        if len(body) > SPLIT_IN_THREAD_CHARS:  # splitting a long answer takes a while
            parts = await asyncio.to_thread(blocks.answer_parts, body)
        else:
            parts = blocks.answer_parts(body)
        stream_ts = self._outbox.stream_ts
        progress_ts = self._outbox.progress_ts
        if self._recovered and progress_ts is None:
            # The process may have died between posting and recording it: look for it.
            progress_ts = self._outbox.progress_ts = await self._calls.find_posted("progress")

        if stream_ts is not None and not self._recovered:
            if await self._stream.finish(stream_ts, body, extras):
                if progress_ts is not None:
                    await self._finish_progress(progress_ts, attachments, len(tools), outcome)
                elif attachments:  # the run ended before its in-progress message was due
                    await self._post_tools(attachments, len(tools))
                return
        elif stream_ts is not None:
            # Recovery: end the stream if Slack still keeps it open; a failure is expected.
            await self._calls.stop_stream_quietly(stream_ts)

        # The first part replaces the in-progress message (or the stream); the rest follow.
        target = stream_ts if stream_ts is not None else progress_ts
        await self._post_parts(parts or [""], extras, target, attachments)
        if stream_ts is not None and progress_ts is not None:
            await self._finish_progress(progress_ts, attachments, len(tools), outcome)
        elif stream_ts is not None and attachments:
            await self._post_tools(attachments, len(tools))

    async def _post_parts(
        self,
        parts: list[str],
        extras: list[dict[str, Any]],
        target: str | None,
        attachments: list[dict[str, Any]] | None,
    ) -> None:
        stream_ts = self._outbox.stream_ts
        first_attachments = attachments if target == self._outbox.progress_ts else None
        # Recovery: the run that died (or lost its lease to this instance) may have posted
        # parts before its run was closed; they are shown again in place, never twice (one
        # look through the thread for all of them).
        posted = await self._calls.posted_parts() if self._recovered else {}
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            message = blocks.answer_message(
                part,
                extras=extras if last else [],
                attachments=first_attachments if index == 0 else None,
            )
            if index == 0 and target is not None:
                if await self._calls.update(target, message):
                    continue
                if target == stream_ts:  # a half-streamed answer must not stay beside it
                    await self._calls.delete(target)
            earlier = posted.get(f"answer:{index}")
            if earlier is not None and await self._calls.update(earlier, message):
                continue
            await self._calls.post_once(message, part=f"answer:{index}")

    async def _post_tools(self, attachments: list[dict[str, Any]], count: int) -> None:
        """The tool calls of a streamed answer whose in-progress message was never posted
        (the run ended first): one message with one attachment per call, as it would have
        been left."""
        summary = f"Used {count} tool{'s' if count != 1 else ''}."
        body = blocks.MessageBody(summary, [blocks.context_block(summary)], attachments)
        await self._calls.post_once(body, part="tools")

    async def _finish_progress(
        self,
        ts: str,
        attachments: list[dict[str, Any]] | None,
        count: int,
        outcome: RunOutcome,
    ) -> None:
        """The in-progress message beside a streamed answer: the Stop button goes, the tool
        calls stay; with no tool calls it has nothing left to say and is deleted."""
        if self._recovered:  # (its tool calls are known only to the process that died)
            summary = "Done." if outcome == "done" else "Interrupted."
        elif count:
            summary = f"Used {count} tool{'s' if count != 1 else ''}."
        else:
            if await self._calls.delete(ts):
                self._outbox.progress_ts = None
                return
            summary = "Done."
        body = blocks.MessageBody(summary, [blocks.context_block(summary)], attachments)
        await self._calls.update(ts, body)
