"""The text of a run in Slack so far, split the way it is laid out: narration and answer.

Owns: `RunText`: the narration (the texts of replies that called tools: it goes with the tool
activity), the answer (the texts of replies since the last one that called tools) and the reply
being written (the loop's working copy, read only when rendering, so a delta costs nothing; it
counts as answer until it turns out to call tools), and the final answer's text at the end.

Must not: do IO, or decide where any of it is shown (`bots.platforms.slack.surface` does).
"""

from __future__ import annotations

from bots.platforms.slack import blocks
from bots.surface.narration import visible_text
from core.messages import AssistantMessage


class RunText:
    def __init__(self) -> None:
        self._narration: list[str] = []
        self._answer: list[str] = []
        self._current: AssistantMessage | None = None
        self.tool_replies = 0  # replies that called tools so far

    def writing(self, message: AssistantMessage) -> None:
        self._current = message

    def reply_ended(self, message: AssistantMessage) -> bool:
        """Take in a completed reply; True if something is to be shown anew."""
        self._current = None
        text = visible_text(message)
        if message.tool_calls():
            # Not the answer after all: it and any text before it narrate the tool activity.
            self._narration += [t for t in (*self._answer, text) if t.strip()]
            self._answer = []
            self.tool_replies += 1
            return True
        if text.strip():
            self._answer.append(text)
            return True
        return False

    def any(self) -> bool:
        """Some text exists (the next flush shows it)."""
        return bool(self._answer or self._narration) or self.writing_text()

    def writing_text(self) -> bool:
        return self._current is not None and bool(self._current.text().strip())

    def narration(self) -> str:
        return blocks.defuse_broadcasts("\n\n".join(text.strip("\n") for text in self._narration))

    def answer(self) -> str:
        """The answer so far: the texts since the last reply that called tools."""
        texts = list(self._answer)
        if self._current is not None:
            current = self._current.text()
            if current.strip():
                texts.append(current)
        return blocks.defuse_broadcasts("\n\n".join(text.strip("\n") for text in texts))

    def final(self, final_text: str) -> str:
        """The whole answer: what was shown while it streamed, or the runner's final text
        when the surface saw less (a restart, a surface that joined late). Text already
        shown as narration (a run that ended in its tool calls) is not the answer."""
        shown = self.answer()
        final = blocks.defuse_broadcasts(final_text.strip("\n"))
        if not final.strip() or shown.rstrip().endswith(final.strip()):
            return shown
        if any(text.strip() == final.strip() for text in self._narration):
            return shown
        return final
