"""An answer far longer than one Slack message (over `SPLIT_IN_THREAD_CHARS`, split in a worker
thread) reaches the thread whole, once, in order, across several messages within Slack's limits
(issue 24, "tests that would not notice")."""

from __future__ import annotations

from pathlib import Path

from bots.platforms.slack.surface_final import SPLIT_IN_THREAD_CHARS
from core.models.scripted import Reply, ScriptedModel
from tests.bots.platforms.slack.e2e_harness import message_event, running
from tests.bots.platforms.slack.surface_script import has_feedback, markdown_of
from tests.fakes.slack_server import FakeSlack


def long_answer() -> str:
    paragraphs = [
        f"Paragraph {n}: " + " ".join(f"word{n}-{i}" for i in range(60)) for n in range(150)
    ]
    answer = "\n\n".join(paragraphs)
    assert len(answer) > SPLIT_IN_THREAD_CHARS + 10_000
    return answer


async def test_an_answer_over_fifty_thousand_characters_is_shown_whole_and_once(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    answer = long_answer()
    model = ScriptedModel([Reply(text=answer)])
    async with running(fake_slack, tmp_path, model) as app:
        event = message_event(fake_slack, "write a lot")
        await app.event(event)
        await app.settle()
        shown = [m for m in app.replies("C1", event["ts"]) if markdown_of(m)]
    assert len(shown) >= 2  # no single message may hold it
    words = " ".join(markdown_of(m) for m in shown).split()
    assert words == answer.split()  # every word, in order, none twice
    assert has_feedback(shown[-1])
