"""The end of a run in Slack: the final answer where the run was shown.

Owns: `FinalAnswer`: the layout of a finished run. A run that used tools (or narrated before
calling them) reads top to bottom as its tool activity, then its answer: the in-progress
message becomes the activity message (the narration, "Used N tools.", one attachment per
call, the Stop button gone) and the answer is below it, only the answer (the text written
after the last tool call), in the stream it was written in or in new messages. A run without
tools is its answer alone: the stream, or the in-progress message replaced (with no tools it
has nothing left to say and is deleted beside a stream). The answer is standard Markdown split
at safe boundaries, how it ended, usage and 👍/👎 under its last part; a run with no answer
text shows how it ended under the activity message. After a restart, the parts an earlier
process posted are edited in place rather than posted twice.

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
        *,
        narration: str = "",
    ) -> None:
        if len(body) > SPLIT_IN_THREAD_CHARS:  # splitting a long answer takes a while
            parts = await asyncio.to_thread(blocks.answer_parts, body)
        else:
            parts = blocks.answer_parts(body)
        stream_ts = self._outbox.stream_ts
        progress_ts = self._outbox.progress_ts
        if self._recovered and progress_ts is None:
            # The process may have died between posting and recording it: look for it.
            progress_ts = self._outbox.progress_ts = await self._calls.find_posted("progress")
        # (A recovered surface knows nothing of the run's tools: its answer is laid out alone.)
        activity = not self._recovered and bool(tools or narration.strip())
        if activity:
            await self._show_activity(narration, tools, [] if body.strip() else extras)
            if not body.strip() and stream_ts is None:
                return  # (no answer: how it ended is under the activity)

        if stream_ts is not None and not self._recovered:
            if await self._stream.finish(stream_ts, body, extras):
                if progress_ts is not None and not activity:
                    await self._finish_progress(progress_ts, outcome)
                return
        elif stream_ts is not None:
            # Recovery: end the stream if Slack still keeps it open; a failure is expected.
            await self._calls.stop_stream_quietly(stream_ts)

        # The first part replaces the stream (or the in-progress message of a run without
        # tools); the rest follow, below the activity.
        target = stream_ts if stream_ts is not None or activity else progress_ts
        await self._post_parts(parts or [""], extras, target)
        if stream_ts is not None and progress_ts is not None and not activity:
            await self._finish_progress(progress_ts, outcome)

    async def _show_activity(
        self, narration: str, tools: list[blocks.ToolView], extras: list[dict[str, Any]]
    ) -> None:
        """The in-progress message left above the answer as the run's tool activity; posted
        if it never was (the run ended before it could be)."""
        body = blocks.activity_message(narration=narration, tools=tools, extras=extras)
        ts = self._outbox.progress_ts
        if ts is not None and await self._calls.update(ts, body):
            return
        self._outbox.progress_ts = await self._calls.post_once(body, part="progress")

    async def _post_parts(
        self, parts: list[str], extras: list[dict[str, Any]], target: str | None
    ) -> None:
        stream_ts = self._outbox.stream_ts
        # Recovery: the run that died (or lost its lease to this instance) may have posted
        # parts before its run was closed; they are shown again in place, never twice (one
        # look through the thread for all of them).
        posted = await self._calls.posted_parts() if self._recovered else {}
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            message = blocks.answer_message(part, extras=extras if last else [])
            if index == 0 and target is not None:
                if await self._calls.update(target, message):
                    continue
                if target == stream_ts:  # a half-streamed answer must not stay beside it
                    await self._calls.delete(target)
            earlier = posted.get(f"answer:{index}")
            if earlier is not None and await self._calls.update(earlier, message):
                continue
            await self._calls.post_once(message, part=f"answer:{index}")

    async def _finish_progress(self, ts: str, outcome: RunOutcome) -> None:
        """The in-progress message beside an answer of a run without tools: it has nothing
        left to say and is deleted (a recovered surface, which cannot know the run's tools,
        says how it ended instead)."""
        if not self._recovered and await self._calls.delete(ts):
            self._outbox.progress_ts = None
            return
        summary = "Done." if outcome == "done" or not self._recovered else "Interrupted."
        # (Attachments left as they are: an earlier process's tool calls stay.)
        await self._calls.update(ts, blocks.MessageBody(summary, [blocks.context_block(summary)]))
